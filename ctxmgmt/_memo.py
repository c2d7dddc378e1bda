"""A memo bounded by the bytes of what it keeps alive, keyed by object identity."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

V = TypeVar("V")

__all__ = ["BY_CONTENT", "Memo", "clear_shared", "content_key", "rough_size", "shared"]


class _Clearable(Protocol):
    def clear(self) -> None: ...


C = TypeVar("C", bound=_Clearable)

_SHARED: list[_Clearable] = []

BY_CONTENT = object()
"""The object to give a memo whose keys are content digests (see :func:`content_key`)."""


def content_key(text: str) -> bytes:
    """A 128-bit digest of a text, to key a memo by content without keeping the text alive:
    equal texts from different requests share an entry."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Memo(Generic[V]):
    """A memo bounded by the bytes of what it keeps alive: the oldest entries go first.

    Each entry keeps its object, so that a key (an ``id``) cannot be reused by another
    object while the entry lives; a lookup checks that it is the same object. A memo keyed
    by :func:`content_key` is given :data:`BY_CONTENT` as the object.
    """

    def __init__(self, max_bytes: int, *, shared: bool = False) -> None:
        """``shared``: a module-level memo, which :func:`clear_shared` empties."""
        self.max_bytes = max_bytes
        self.bytes = 0
        # An OrderedDict: evicting from the front stays O(1) however many entries went
        # (a plain dict's next(iter()) scans the holes its deletions leave at its front).
        self._data: OrderedDict[Any, tuple[object, V, int]] = OrderedDict()
        self._lock = threading.Lock()
        if shared:
            _SHARED.append(self)

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Any, obj: object) -> V | None:
        hit = self._data.get(key)
        return hit[1] if hit is not None and hit[0] is obj else None

    def put(self, key: Any, obj: object, value: V, size: int) -> None:
        self.put_many(((key, obj, value, size),))

    def put_many(self, entries: Iterable[tuple[Any, object, V, int]]) -> None:
        """``put`` each ``(key, obj, value, size)``, under one lock (a list counted whole)."""
        with self._lock:
            data = self._data
            for key, obj, value, size in entries:
                old = data.pop(key, None)  # stale once the key has a new value, kept or not
                if old is not None:
                    self.bytes -= old[2]
                if size > self.max_bytes:
                    continue  # larger than the whole memo: not worth keeping
                data[key] = (obj, value, size)
                self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, _, gone) = data.popitem(last=False)
                self.bytes -= gone

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.bytes = 0


def shared(cache: C) -> C:
    """Register a module-level cache (anything with ``clear()``) that :func:`clear_shared`
    empties, so that a module above (the formats) need not be called by one below (tokens)."""
    _SHARED.append(cache)
    return cache


def clear_shared() -> None:
    """Empty every module-level memo and cache."""
    for memo in _SHARED:
        memo.clear()


_BYTES = (64, 200, 64, 32, 64)
"""What a value keeps alive besides its characters: a string's, a mapping's, a list's
overhead, another value, and a value nested past 16 deep."""
_TEXT = (0, 0, 0, 8, 0)
"""Its text alone: the characters of its strings, and a few for each other value."""


def rough_size(value: Any, *, text: bool = False) -> int:
    """About how many bytes a JSON-like value keeps alive (its strings, plus overhead); with
    ``text``, about how many characters of text it holds. A nesting past 16 deep is counted
    as one small value."""
    return _rough(value, 0, _TEXT if text else _BYTES)


def _rough(value: Any, depth: int, weights: tuple[int, int, int, int, int]) -> int:
    string, mapping, sequence, other, deep = weights
    if isinstance(value, str):
        return string + len(value)
    if depth > 16:
        return deep
    if isinstance(value, Mapping):
        return mapping + sum(_rough(v, depth + 1, weights) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sequence + sum(_rough(v, depth + 1, weights) for v in value)
    return other
