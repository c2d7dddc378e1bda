"""The message sequence of a :class:`~ctxmgmt.Context`: immutable, and extended by an append in O(1).

A ``History`` is a view of the first ``n`` entries of a shared, append-only list (its *log*).
An append that extends the newest view adds to that list; an append to an older view (a
branch) copies what it shares. No entry a view can see ever changes, so every view is an
immutable value, as a tuple is.

The incremental protocol
------------------------
What ctxmgmt learns about a history's messages is kept on its log, so that a history grown
by appends costs only its new part. The protocol, used by the token counter, the checks,
the format detection and the managers:

- :meth:`History.of` (a history of a list, adopting one handed in before) and
  :meth:`History.own` (a history of a list handed over, no copy);
- :meth:`History.known` and :meth:`History.mark`: how many of the first messages are known
  to have a property of prefixes (:data:`IS_CHAT`: in the chat format; :data:`IS_VALID`: a valid
  list, open tool calls at its end allowed), and recording that all of a history's have it;
- :meth:`History.totals`: running totals kept per key (the token counter's), carried into
  a branch;
- :attr:`History.memo`: what a caller derives from the messages, by the caller's own key;
  :attr:`History.lock` is held while extending anything kept on the log;
- :meth:`History.is_prefix_of`, and the functions :func:`items` and :func:`scan`.

Lists handed again
------------------
A caller that keeps a plain list, appends to it and hands it again each call (``Context(
messages=the_list)``, as adapters do) must cost what it added, not its length: copying a
50,000-message list or comparing it whole costs more than the rest of a steady apply (each
of its 50,000 pointers is read). :meth:`History.of` therefore looks among the logs of the
last :data:`HANDED_KEPT` histories it made from lists (at most :data:`HANDED_MESSAGES`
messages in all) for one whose entries the new list
starts with, and extends that log, so the new history shares it and all that is known about
it (counts, checks, the managers' memos). Whether the list still starts with the old one is
decided by identity (a message replaced by an equal one counts as the same):

- the first and the last of the known messages must be the very objects (rules out a new
  list of new objects, and an insertion or removal before the end: it shifts the last one,
  unless a later change shifts it back, which the rules below treat as a replacement);
- up to :data:`EXACT_UP_TO` known messages, every one is compared, in one C-level list
  comparison with no copy (about 1 us at 2,000 messages): exact;
- beyond, the first and last :data:`EDGE` known messages are compared, and
  :data:`SAMPLES` more spread evenly, whose offset turns with every call: a message
  replaced anywhere (or an insertion and a removal in the middle that leave both ends where
  they were) is found within ``known // SAMPLES`` calls, one replaced among the newest (the
  usual edit: a streamed or corrected reply) at once.

What is adopted is the old history's messages, so a history is never counted or checked
for messages other than the ones it holds: counts and checks are never stale for the
history a caller gets. What the sample can miss, past 4,096 messages, is a caller's
replacement of a message in the middle of a list it has handed over, which breaks the
contract messages are handed under (messages, and the lists that hold them, are values:
append to a list you have handed over, do not change what it held; build the changed list
with :meth:`Context.splice` or hand a new list of new messages). Editing a message dict in
place was never detected (counts are memoised per message object).
"""

from __future__ import annotations

import operator
import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, overload

__all__ = ["IS_CHAT", "IS_VALID", "History", "forget_handed", "items", "scan", "starts_with"]

IS_CHAT = "chat"
"""The fact that messages are in the OpenAI chat format (no other provider's messages)."""
IS_VALID = "valid"
"""The fact that messages make a valid chat list (open tool calls at its end allowed)."""
HANDED_KEPT = 64
"""Histories built from lists that :meth:`History.of` keeps, to find one a new list extends
(a miss costs two identity checks each, so a process serving many conversations in turn
finds each of them)."""
HANDED_MESSAGES = 1_000_000
"""What the kept histories may hold in all, in messages: the oldest go first past it."""
EXACT_UP_TO = 4096
"""Lists of up to this many known messages are compared whole when handed again."""
EDGE = 32
"""Known messages compared at each end of a longer list."""
SAMPLES = 256
"""Known messages compared in between, spread evenly, their offset turning each call."""


class _Log:
    """The shared list behind a family of views, and what is known about its entries."""

    __slots__ = ("derived", "facts", "items", "lock", "scans", "sums", "turn")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.lock = threading.Lock()
        # fact -> how many of the first items are known to have it: see History.known()
        self.facts: dict[Hashable, int] = {}
        # name -> (items scanned, what the scan found): see scan()
        self.scans: dict[str, tuple[int, list[int]]] = {}
        # what a caller derived from these items, by the caller's key (see History.memo)
        self.derived: dict[Any, Any] = {}
        # key -> running totals (see History.totals)
        self.sums: dict[Hashable, tuple[array[int], array[int]]] = {}
        self.turn = 0  # which sample of a long list is compared next (see History.of)


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
    pure function of one message, the same for every call with this name. The list is
    read at once: it is the History's own (neither change nor keep it)."""
    if not isinstance(messages, History):
        return [i for i, m in enumerate(messages) if test(m)]
    log, n = messages._log, messages._n
    done, found = log.scans.get(name, (0, []))
    if done < n:
        with log.lock:
            done, found = log.scans.setdefault(name, (0, []))
            if done < n:
                items = log.items
                # Extended in place: older views cut it at their length below.
                found.extend([i for i in range(done, n) if test(items[i])])
                log.scans[name] = (n, found)
    return found if len(found) == 0 or found[-1] < n else found[: bisect_left(found, n)]


def starts_with(seq: Sequence[Any], head: Sequence[Any]) -> bool:
    """Whether ``seq`` starts with the very objects of ``head``, in order: by identity, so an
    equal but new object is another (a conversion memoised for one is never reused for it).
    Compare :meth:`History.is_prefix_of`, where an equal message counts as the same."""
    return len(head) <= len(seq) and all(map(operator.is_, items(head), items(seq)))


def _same_start(items: list[Any], k: int, seq: list[Any], turn: int) -> bool:
    """Whether ``seq`` starts with ``items[:k]``, by the rule of the module docstring
    ("Lists handed again"). ``items`` may be longer than ``k`` only by what ``seq`` has there."""
    if seq[k - 1] is not items[k - 1] or seq[0] is not items[0]:
        return False
    if k <= EXACT_UP_TO:
        if len(items) == len(seq):
            return items == seq  # no copy: C compares the pointers (identity first)
        return items[:k] == seq[:k]
    if items[:EDGE] != seq[:EDGE] or items[k - EDGE : k] != seq[k - EDGE : k]:
        return False
    stride = k // SAMPLES
    start = turn % stride
    return items[start:k:stride] == seq[start:k:stride]


same_start = _same_start
"""Public: whether a list starts with the messages a caller kept (``items``, ``k`` of them),
by the rule :meth:`History.of` uses; ``turn`` turns the samples, a counter the caller bumps
each call (the conversation engine's check that a record of dicts continues its view)."""


class History(Sequence[Mapping[str, Any]]):
    """An immutable sequence of messages; ``append`` returns a longer one in O(1).

    See the module docstring for the incremental protocol its methods form.
    """

    __slots__ = ("_log", "_n")

    _log: _Log
    _n: int

    def __init__(self, messages: Iterable[Mapping[str, Any]] = ()) -> None:
        items = list(messages)
        self._log = _Log(items)
        self._n = len(items)

    @classmethod
    def own(cls, items: list[Any]) -> History:
        """A history of ``items``, which the caller hands over: no copy, and the caller
        never changes the list again."""
        return cls._view(_Log(items), len(items))

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, Any]]) -> History:
        """A history of these messages. A list that starts with a list made into a history
        before (one of the last :data:`HANDED_KEPT`) extends that history, sharing what is
        known about it, so handing a grown list again costs what it added (see the module
        docstring, "Lists handed again", for how the start is compared)."""
        if type(messages) is History or isinstance(messages, History):
            return messages
        seq = messages if type(messages) is list else list(messages)
        if not seq:
            return cls.own([])
        for log in _handed:  # a tuple, replaced whole: read without the lock
            found = _extended(log, seq)
            if found is not None:
                if log is not _handed[0]:
                    _remember(log)
                return found
        made = cls.own(list(seq) if seq is messages else seq)
        _remember(made._log)
        return made

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
            branch.facts = {fact: min(k, self._n) for fact, k in log.facts.items()}
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

    # -- the incremental protocol ---------------------------------------------------------
    def known(self, fact: Hashable) -> int:
        """How many of the first messages are known to have ``fact``, a property that holds
        for every prefix of a list that has it (:data:`IS_CHAT`, :data:`IS_VALID`)."""
        k = self._log.facts.get(fact, 0)
        return k if k < self._n else self._n

    def mark(self, fact: Hashable) -> None:
        """Record that all of this history's messages have ``fact`` (the caller checked them)."""
        facts = self._log.facts
        if facts.get(fact, 0) < self._n:
            facts[fact] = self._n

    def totals(self, key: Hashable) -> tuple[array[int], array[int]]:
        """Running totals kept under ``key`` for the log's entries, in order (two arrays the
        caller extends under :attr:`lock`, never shortens); empty at first, and a branch
        starts with its shared part's."""
        sums = self._log.sums.get(key)
        if sums is None:
            with self._log.lock:
                sums = self._log.sums.setdefault(key, (array("q"), array("q")))
        return sums

    @property
    def memo(self) -> dict[Any, Any]:
        """What callers derive from these messages, by their own keys; it lives as long as the
        messages do, and is shared by every view of the log, so a value must say for how many
        messages it holds. A key must be stable across instances: what the value depends on
        (e.g. a manager's type, its config frozen, the tokenizer's name), never an instance
        or its id, or each instance made per call adds an entry the messages keep alive."""
        return self._log.derived

    @property
    def lock(self) -> threading.Lock:
        """Held while extending what is kept on the messages (:meth:`totals`, :attr:`memo`)."""
        return self._log.lock

    def is_prefix_of(self, other: Sequence[Any]) -> bool:
        """Whether this history is ``other``'s first ``len(self)`` messages (by identity; an
        equal message counts as the same), compared whole."""
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
        return k == 0 or (theirs[k - 1] is items[k - 1] and list(theirs[:k]) == items[:k])

    # -- a tuple ---------------------------------------------------------------------------
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

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and deep-copied) as a new history of its messages: what is known of them
        (counts, marks) is the process's own, and its lock is no value."""
        return (History, (list(self),))

    def __repr__(self) -> str:
        return f"History({list(self)!r})"


_handed: tuple[_Log, ...] = ()
"""The logs of the histories :meth:`History.of` made from lists, the newest first."""
_HANDED_LOCK = threading.Lock()


def _extended(log: _Log, seq: list[Any]) -> History | None:
    """A view of ``log`` holding ``seq``, when ``seq`` starts with all of the log's entries
    (compared as the module docstring says); the rest of ``seq`` is added to the log."""
    items, n = log.items, len(seq)
    k = len(items)
    if not 0 < k <= n or seq[k - 1] is not items[k - 1]:
        return None  # the usual miss, without the lock
    with log.lock:
        k = len(items)
        if not 0 < k <= n:
            return None
        log.turn += 1
        if n > k:
            items.extend(seq[k:])  # first, so that the comparison needs no copy
        if _same_start(items, k, seq, log.turn):
            return History._view(log, n)
        del items[k:]
        return None


def _remember(log: _Log) -> None:
    """Keep the log of a history made from a list, the newest first."""
    global _handed
    with _HANDED_LOCK:
        kept, total = [log], len(log.items)
        for other in _handed:
            if other is log:
                continue
            total += len(other.items)
            if len(kept) >= HANDED_KEPT or total > HANDED_MESSAGES:
                break
            kept.append(other)
        _handed = tuple(kept)


def forget_handed() -> None:
    """Forget the histories kept to find lists handed again (``tokens.clear_caches`` calls it)."""
    global _handed
    with _HANDED_LOCK:
        _handed = ()


class Recent:
    """The last few histories a cache saw, to find one that a history new to it starts with
    (the format detection's lists known to be chat), compared whole. Bounded by count and, as
    :meth:`History.of`'s are, by messages in all (a history longer than the bound is not
    kept); it holds a copy of each list as it was added (the messages themselves, not a log
    that grows), only what callers handed in. Lists handed again are found by
    :meth:`History.of`."""

    def __init__(self, kept: int = 4, max_messages: int = HANDED_MESSAGES) -> None:
        self._kept = kept
        self._max_messages = max_messages
        self._items: list[History] = []
        self._sizes: list[int] = []
        self._lock = threading.Lock()

    def prefix_of(self, seq: Sequence[Any]) -> History | None:
        """The newest kept history that ``seq`` starts with."""
        with self._lock:
            items = list(self._items)
        return next((k for k in items if k.is_prefix_of(seq)), None)

    def add(self, history: History) -> None:
        n = len(history)
        if n > self._max_messages:
            return
        # A copy of its messages as they are now: the history's log grows with its
        # conversation, and would be kept alive whole, past the bound, once the caller drops it.
        copy = History.own(history._log.items[:n])
        with self._lock:
            self._items.insert(0, copy)
            self._sizes.insert(0, n)
            while len(self._items) > self._kept or sum(self._sizes) > self._max_messages:
                self._items.pop()
                self._sizes.pop()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._sizes.clear()
