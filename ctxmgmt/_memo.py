"""A memo bounded by the bytes of what it keeps alive, keyed by object identity."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

V = TypeVar("V")

__all__ = ["BY_CONTENT", "ENTRY_BYTES", "Memo", "clear_shared", "content_key", "rough_size", "shared"]


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


ENTRY_BYTES = 512
"""What an entry costs the memo itself, counted with the size of what it keeps: its three
mappings' slots and its value and size as ints (measured: about 300 bytes packed, 500 with
the slack a dict keeps as it grows). Without it, a memo of many small entries (a token
count per short message) held about twice its bound."""


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
        # Three mappings, not a tuple per entry: a dict's entries are no objects of their own,
        # so a memo of 10,000 entries adds no 10,000 objects for the garbage collector to
        # track (a first call that memoises a whole history would set off full collections
        # of its caller's heap). The values are in an OrderedDict: evicting from the front
        # stays O(1) however many entries went (a plain dict's next(iter()) scans the holes
        # its deletions leave at its front).
        self._values: OrderedDict[Any, V] = OrderedDict()
        self._objects: dict[Any, object] = {}
        self._sizes: dict[Any, int] = {}
        self._lock = threading.Lock()
        if shared:
            _SHARED.append(self)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Any, obj: object) -> V | None:
        # Without the lock: the entry's object is ``obj`` (alive: the caller holds it, so its
        # id is no other's), and its value is its own or gone (evicted meanwhile).
        if self._objects.get(key) is not obj:
            return None
        return self._values.get(key)

    def put(self, key: Any, obj: object, value: V, size: int) -> None:
        self.put_many(((key, obj, value, size),))

    def put_many(self, entries: Iterable[tuple[Any, object, V, int]]) -> None:
        """``put`` each ``(key, obj, value, size)``, under one lock (a list counted whole)."""
        with self._lock:
            values, objects, sizes = self._values, self._objects, self._sizes
            for key, obj, value, given in entries:
                size = given + ENTRY_BYTES
                old = sizes.pop(key, None)  # stale once the key has a new value, kept or not
                values.pop(key, None)
                objects.pop(key, None)
                if old is not None:
                    self.bytes -= old
                if size > self.max_bytes:
                    continue  # larger than the whole memo: not worth keeping
                try:
                    # The object first: a reader that finds it finds its value or none, never
                    # another object's value.
                    objects[key] = obj
                    values[key] = value
                except BaseException:  # interrupted (Ctrl-C, MemoryError): no half entry
                    objects.pop(key, None)
                    values.pop(key, None)
                    raise
                sizes[key] = size
                self.bytes += size
                # As it goes: a batch larger than the bound never holds more than the bound.
                # Tolerant of an entry an interruption left without its size: no KeyError here.
                while self.bytes > self.max_bytes and values:
                    old_key, _ = values.popitem(last=False)
                    objects.pop(old_key, None)
                    self.bytes -= sizes.pop(old_key, 0)

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._objects.clear()
            self._sizes.clear()
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


_BYTES = (64, 200, 64, 32)
"""What a value keeps alive besides its characters: a string's, a mapping's and a list's
overhead, and another value's."""
_TEXT = (0, 0, 0, 8)
"""Its text alone: the characters of its strings, and a few for each other value."""


def rough_size(value: Any, *, text: bool = False) -> int:
    """About how many bytes a JSON-like value keeps alive (its strings, plus overhead); with
    ``text``, about how many characters of text it holds. Every part is counted, however deep
    (a bound that held past some depth would let a value hide its bulk there), and a mapping
    or list that appears twice once (it is kept alive once; a cycle ends)."""
    string, mapping, sequence, other = _TEXT if text else _BYTES
    if type(value) is dict:  # the commonest value, a flat item of strings: no walk
        total = mapping
        for v in value.values():
            if type(v) is not str:
                break
            total += string + len(v)
        else:
            return total
    total = 0
    stack = [value]
    seen: set[int] = set()
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            total += string + len(v)
        elif isinstance(v, Mapping):
            if id(v) not in seen:
                seen.add(id(v))
                total += mapping
                stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            if id(v) not in seen:
                seen.add(id(v))
                total += sequence
                stack.extend(v)
        else:
            total += other
    return total
