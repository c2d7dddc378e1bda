"""The message sequence of a :class:`~ctxmgmt.Context`: immutable, and extended by an append in O(1).

A ``History`` is a view of the first ``n`` entries of a shared, append-only list. An
append that extends the newest view adds to that list; an append to an older view
(a branch) copies what it shares. No entry a view can see ever changes, so every
view is an immutable value, as a tuple is.

Token counts ride on the shared list: the counter keeps running totals per entry, so
a long conversation that grows by appends is counted in proportion to what it
gained, not to its length.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, overload

__all__ = ["History", "items", "scan"]


class _Log:
    """The shared list behind a family of views, with the running token totals."""

    __slots__ = ("checked", "derived", "items", "lock", "scans", "sums", "valid")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.lock = threading.Lock()
        self.checked = 0
        """How many of the first items are known to be in the chat format."""
        self.valid = 0
        """How many of the first items are known to make a valid list (open tool calls at
        its end allowed)."""
        # name -> (items scanned, what the scan found): see scan()
        self.scans: dict[str, tuple[int, list[int]]] = {}
        # what a manager derived from these items, by the manager's key (see derived())
        self.derived: dict[Any, Any] = {}
        # tokenizer name -> (cumulative tokens, cumulative non-system message count)
        self.sums: dict[str, tuple[array[int], array[int]]] = {}


def items(messages: Sequence[Any]) -> Sequence[Any]:
    """The messages as a plain list or tuple, for loops that index them often (a History's
    own indexing is a Python call). The result must not be changed."""
    if isinstance(messages, History):
        log, n = messages._log, messages._n
        return log.items if len(log.items) == n else tuple(log.items[:n])
    return messages


def scan(messages: Sequence[Any], name: str, test: Callable[[Any], bool]) -> list[int]:
    """The indices of the messages that pass ``test``, in order. A History remembers the
    answer under ``name``, so a grown one costs only its new messages. ``test`` must be a
    pure function of one message, the same for every call with this name."""
    if not isinstance(messages, History):
        return [i for i, m in enumerate(messages) if test(m)]
    log, n = messages._log, messages._n
    done, found = log.scans.get(name, (0, []))
    if done < n:
        with log.lock:
            done, found = log.scans.get(name, (0, []))
            found = found + [i for i in range(done, n) if test(log.items[i])]
            log.scans[name] = (n, found)
    return found if len(found) == 0 or found[-1] < n else found[: bisect_left(found, n)]


class History(Sequence[Mapping[str, Any]]):
    """An immutable sequence of messages; ``append`` returns a longer one in O(1)."""

    __slots__ = ("_log", "_n")

    _log: _Log
    _n: int

    def __init__(self, messages: Iterable[Mapping[str, Any]] = ()) -> None:
        items = list(messages)
        self._log = _Log(items)
        self._n = len(items)

    @classmethod
    def _own(cls, items: list[Any]) -> History:
        """A history of ``items``, which the caller hands over (no copy)."""
        return cls._view(_Log(items), len(items))

    @classmethod
    def _view(cls, log: _Log, n: int) -> History:
        view = object.__new__(cls)
        view._log = log
        view._n = n
        return view

    def append(self, *messages: Mapping[str, Any]) -> History:
        """This history with ``messages`` after it. The new messages are handed over:
        do not edit them in place afterwards."""
        if not messages:
            return self
        log = self._log
        with log.lock:
            if len(log.items) == self._n:
                log.items.extend(messages)
                return History._view(log, self._n + len(messages))
            # A branch from an older view: it gets a log of its own.
            branch = _Log(log.items[: self._n])
            branch.checked = min(log.checked, self._n)
            branch.valid = min(log.valid, self._n)
            for name, (tokens, count) in log.sums.items():
                kept = min(self._n, len(tokens))
                branch.sums[name] = (tokens[:kept], count[:kept])
        branch.items.extend(messages)
        return History._view(branch, self._n + len(messages))

    def prefix(self, n: int) -> History:
        """Its first ``n`` messages, in O(1): a view of the same log, with its counts."""
        if not 0 <= n <= self._n:
            raise ValueError(f"a prefix of {n} messages of a history of {self._n}")
        return History._view(self._log, n)

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Mapping[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Mapping[str, Any], ...]: ...
    def __getitem__(self, index: int | slice) -> Any:
        n = self._n
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            items = self._log.items
            if step == 1:
                return tuple(items[start:stop])
            return tuple(items[i] for i in range(start, stop, step))  # a stop of -1 means "before 0"
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("history index out of range")
        return self._log.items[i]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return islice(self._log.items, self._n)

    def __reversed__(self) -> Iterator[Mapping[str, Any]]:
        items = self._log.items
        return (items[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            if other._n != self._n:
                return False
            if other._log is self._log:
                return True
            return self._log.items[: self._n] == other._log.items[: other._n]
        if isinstance(other, (tuple, list)):
            return len(other) == self._n and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"History({list(self)!r})"

    def _checked(self) -> int:
        """How many of the first messages are known to be in the chat format."""
        return min(self._log.checked, self._n)

    def _mark_checked(self) -> None:
        log = self._log
        if log.checked < self._n:
            log.checked = self._n

    def _valid(self) -> int:
        """How many of the first messages are known to make a valid list."""
        return min(self._log.valid, self._n)

    def _mark_valid(self) -> None:
        log = self._log
        if log.valid < self._n:
            log.valid = self._n

    def _derived(self) -> dict[Any, Any]:
        """What managers keep about this history's messages, by their own keys; it lives as
        long as the messages do."""
        return self._log.derived

    def _prefix_of(self, other: Sequence[Any]) -> bool:
        """Whether this history is ``other``'s first ``len(self)`` messages, by identity."""
        k = self._n
        if k > len(other):
            return False
        if isinstance(other, History):
            if other._log is self._log:
                return True
            theirs = other._log.items
        else:
            theirs = other  # type: ignore[assignment]
        items = self._log.items
        return k == 0 or (theirs[k - 1] is items[k - 1] and theirs[:k] == items[:k])


class Recent:
    """The last few histories a cache saw, to find one that a new list starts with: a caller
    that hands a grown list each call costs its new part (the token counter's running totals,
    the format detection). Bounded by count; it holds only what callers handed in."""

    def __init__(self, kept: int = 4) -> None:
        self._kept = kept
        self._items: list[History] = []
        self._lock = threading.Lock()

    def prefix_of(self, seq: Sequence[Any], where: Callable[[History], bool] | None = None) -> History | None:
        """The newest kept history that ``seq`` starts with (and that ``where`` accepts)."""
        with self._lock:
            items = list(self._items)
        return next((k for k in items if (where is None or where(k)) and k._prefix_of(seq)), None)

    def add(self, history: History) -> None:
        with self._lock:
            self._items.insert(0, history)
            del self._items[self._kept :]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
