"""What the engine asks of an offload store, and the batch that makes a manager's archives
one durable write.

A manager archives what it removes through :class:`Archive` (``runtime.offloader``); the
offload package (:mod:`ctxmgmt.offload`) implements it on files and in SQL. Nothing here
does I/O: a :class:`Batch` holds a manager run's archives until the hook run commits them.

References are generated here (``t-`` + 32 random digits for a tool result, ``m-`` + 32 for
a batch of removed messages). Session ids and tool-call ids from requests or from the model
are metadata only: they never name a file or a row key as given (see :func:`session_key`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import secrets
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import OffloadError
from .formats._turns import unmarked

__all__ = [
    "MAX_SESSION",
    "Archive",
    "Batch",
    "BatchWriter",
    "Item",
    "Recall",
    "RefKind",
    "item_text",
    "new_ref",
    "repeatable_refs",
    "session_key",
    "sizing_ref",
    "slice_text",
]

MAX_SESSION = 512


def session_key(session: str) -> str:
    """The store's own key for a session id (a hash: safe as a file or row name)."""
    if not isinstance(session, str) or not session or len(session) > MAX_SESSION or "\x00" in session:
        raise OffloadError("a session id is a non-empty string of at most 512 characters without NUL")
    return hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:40]


_REPEATABLE: ContextVar[tuple[str, Iterator[int]] | None] = ContextVar("ctxmgmt_refs", default=None)


RefKind = Literal["tool_result", "messages"]
_PREFIX: dict[str, str] = {"tool_result": "t", "messages": "m"}
_REF_DIGITS = 32
_SIZING_DIGITS = "0123456789" * 3 + "01"
"""32 decimal digits, as every reference :func:`new_ref` draws."""


def new_ref(kind: RefKind) -> str:
    """A fresh reference: ``t-`` or ``m-`` and 32 random decimal digits (106 bits), never
    anything from a request (within :func:`repeatable_refs`, the next of its sequence).

    Decimal, not hex: a tokenizer splits a run of digits in threes whatever they are, so
    every reference takes the same tokens (13 in o200k and cl100k; a random uuid's hex took
    14 to 28). A conversation's size, and so what its managers decide, never depends on
    which reference was drawn: two runs of it, or two processes that take turns on it, send
    the same requests. References drawn before (hex) read as before."""
    repeatable = _REPEATABLE.get()
    if repeatable is None:
        number = secrets.randbelow(10**_REF_DIGITS)
    else:
        seed, numbers = repeatable
        number = int(hashlib.sha256(f"{seed}:{next(numbers)}".encode()).hexdigest(), 16) % 10**_REF_DIGITS
    return f"{_PREFIX[kind]}-{number:0{_REF_DIGITS}d}"


def sizing_ref(kind: RefKind) -> str:
    """The reference of ``kind`` to size a notice or a summary with before (or instead of)
    drawing one: as long as any and as many tokens as any :func:`new_ref` draws, so that
    text sized with it holds whichever it draws."""
    return f"{_PREFIX[kind]}-{_SIZING_DIGITS}"


@contextlib.contextmanager
def repeatable_refs(seed: str, numbers: Iterator[int] | None = None) -> Iterator[Iterator[int]]:
    """Within the block, references are the same every run: hashes of ``seed`` and the next
    of ``numbers`` (shaped like random ones, so that they cost the same tokens). For a replay
    into a store of its own whose output must not vary (``ctxmgmt eval``); never for a
    shared store, where two replays would give the same references."""
    numbers = itertools.count() if numbers is None else numbers
    token = _REPEATABLE.set((seed, numbers))
    try:
        yield numbers
    finally:
        _REPEATABLE.reset(token)


@dataclass(frozen=True, slots=True)
class Recall:
    """A slice of stored content."""

    ref: str
    text: str
    offset: int
    total: int
    unit: Literal["chars", "lines"]
    clipped: bool = False
    """A line longer than the read's character bound was cut (see :func:`bounded`)."""

    @property
    def next_offset(self) -> int | None:
        """Where the next slice starts, or None at the end."""
        if self.unit == "chars":
            end = self.offset + len(self.text)
        else:
            end = (
                self.offset + self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)
            )
        return end if end < self.total else None


def slice_text(
    ref: str, text: str, offset: int, limit: int | None, unit: Literal["chars", "lines"]
) -> Recall:
    if offset < 0 or (limit is not None and limit < 0):
        raise OffloadError("offset and limit must be >= 0")
    if unit == "chars":
        end = None if limit is None else offset + limit
        return Recall(ref, text[offset:end], offset, len(text), unit)
    lines = text.splitlines(keepends=True)
    end = None if limit is None else offset + limit
    return Recall(ref, "".join(lines[offset:end]), offset, len(lines), unit)


class Archive(Protocol):
    """Where a manager archives what it removes. Every write returns only once it is durable;
    a read gives back exactly what was written."""

    def store_tool_result(self, session: str, content: str, *, tool_call_id: str | None = None) -> str: ...

    def store_messages(self, session: str, messages: list[dict[str, Any]]) -> str: ...

    def read(
        self,
        session: str,
        ref: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        unit: Literal["chars", "lines"] = "chars",
    ) -> Recall: ...


@dataclass(frozen=True, slots=True)
class Item:
    """One archive of a batch: a tool result's text, or a list of removed messages."""

    ref: str
    kind: Literal["tool_result", "messages"]
    content: str | list[dict[str, Any]]
    tool_call_id: str | None = None


@runtime_checkable
class BatchWriter(Protocol):
    """A store that writes several archives at once, durably, all or none."""

    def write_batch(self, session: str, items: list[Item]) -> int:
        """Write every item; returns how many torn records (left by an earlier crash) it
        closed off on the way. Raises OffloadError, having acknowledged none of them."""
        ...


@dataclass(slots=True)
class Batch:
    """The offload store as one manager run sees it: its archives are collected and written
    in one batched, durable write (:meth:`commit`) before its output is used. A run that
    fails commits nothing, so it leaves no orphan archive either.

    References are generated here, up front; a pending archive can be read back already."""

    store: BatchWriter
    pending: dict[str, tuple[str, Item]] = field(default_factory=dict)

    def store_tool_result(self, session: str, content: str, *, tool_call_id: str | None = None) -> str:
        return self._add(session, Item(new_ref("tool_result"), "tool_result", content, tool_call_id))

    def store_messages(self, session: str, messages: list[dict[str, Any]]) -> str:
        kept = [unmarked(m) for m in messages]  # ctxmgmt's own marks are not archived
        return self._add(session, Item(new_ref("messages"), "messages", kept))

    def _add(self, session: str, item: Item) -> str:
        session_key(session)  # a bad session id fails here, in the run
        self.pending[item.ref] = (session, item)
        return item.ref

    def commit(self) -> int:
        """Write what the run archived; returns the torn records closed off on the way."""
        sessions: dict[str, list[Item]] = {}
        for session, item in self.pending.values():
            sessions.setdefault(session, []).append(item)
        self.pending = {}
        return sum(self.store.write_batch(session, items) for session, items in sessions.items())

    def read(
        self,
        session: str,
        ref: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        unit: Literal["chars", "lines"] = "chars",
    ) -> Recall:
        waiting = self.pending.get(ref)
        if waiting is not None and waiting[0] == session:
            return slice_text(ref, item_text(waiting[1]), offset, limit, unit)
        return self.store.read(session, ref, offset=offset, limit=limit, unit=unit)  # type: ignore[attr-defined,no-any-return]

    def __getattr__(self, name: str) -> Any:  # search, list, delete and gc: the store's own
        return getattr(self.store, name)


def item_text(item: Item) -> str:
    """An archive's text as ``read`` returns it."""
    if isinstance(item.content, str):
        return item.content
    return json.dumps(item.content, ensure_ascii=False, indent=1)
