"""The offload store: the whole protocol a store implements (:class:`Offloader`: what the
engine archives through, :class:`~ctxmgmt.archive.Archive`, plus search, list, delete and gc),
and what the stores share (slices, streams, RE2 search).

References and session keys are made by :mod:`ctxmgmt.archive`: session ids and tool-call
ids from requests or from the model are metadata only, never a file or a row key as given.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, runtime_checkable

import re2  # type: ignore[import-untyped]

from .. import archive as _archive
from .._deprecated import moved
from ..archive import Archive, Recall, session_key
from ..errors import OffloadError
from ..messages import text_of
from ..tokens import HIDDEN

__all__ = [
    "ArchiveStream",
    "GcReport",
    "Hits",
    "Listing",
    "OffloadError",
    "Offloader",
    "Recall",
    "check_ref",
    "file_pieces",
    "open_stream",
    "slice_stream",
]

REF = re.compile(r"(?P<kind>[tm])-(?P<id>[0-9a-f]{32})")
MAX_PATTERN = 200
SEARCH_BYTES = 64 * 1024 * 1024
"""A search reads at most this much archived text..."""
SEARCH_SECONDS = 2.0
"""...and runs at most this long; then it answers with what it found, marked truncated."""


def check_ref(ref: Any) -> str:
    """A reference as the store generated it, or an OffloadError."""
    if ref is None:
        raise OffloadError("ref is missing: give an offload reference (t-<32 hex> or m-<32 hex>)")
    if not isinstance(ref, str) or not REF.fullmatch(ref):
        raise OffloadError(f"{str(ref)[:80]!r} is not an offload reference (t-<32 hex> or m-<32 hex>)")
    return ref


@dataclass(frozen=True, slots=True)
class GcReport:
    files: int = 0
    rows: int = 0
    bytes: int = 0
    skipped: tuple[str, ...] = ()
    """What gc left alone: links and other entries that are not its own regular files."""


_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
"""The characters str.splitlines ends a line at."""
SLICE_CHARS = 1_000_000
"""Characters a streamed slice holds at the most (every caller bounds its read below this)."""
STREAM_BYTES = 16 * 1024 * 1024
"""An archive larger than this is read as a stream: a slice costs its own size, not the archive's."""


def slice_stream(
    ref: str, pieces: Iterable[str], offset: int, limit: int | None, unit: Literal["chars", "lines"]
) -> Recall:
    """What :func:`slice_text` gives for the text made of ``pieces``, holding no more than the
    slice and one piece at a time. A slice with a limit holds at most :data:`SLICE_CHARS`
    characters (then it is cut and says so: a line longer than that)."""
    if offset < 0 or (limit is not None and limit < 0):
        raise OffloadError("offset and limit must be >= 0")
    end = None if limit is None else offset + limit
    out: list[str] = []
    held = count = 0
    clipped = False

    cap = SLICE_CHARS if limit is not None else None  # no limit: the whole text, as asked

    def take(text: str) -> None:
        nonlocal held, clipped
        if cap is None:
            out.append(text)
            return
        room = cap - held
        if len(text) > room:
            text, clipped = text[:room], True
        out.append(text)
        held += len(text)

    if unit == "chars":
        for piece in pieces:
            lo, hi = max(offset - count, 0), len(piece) if end is None else min(end - count, len(piece))
            if lo < hi:
                take(piece[lo:hi])
            count += len(piece)
        return Recall(ref, "".join(out), offset, count, unit, clipped)
    pending = False  # a line has begun and not ended
    last = ""  # its last character (a "\r" may end it or be followed by "\n")
    for piece in pieces:
        if not piece:
            continue
        if pending and last == "\r" and piece[0] != "\n":
            count, pending = count + 1, False  # the "\r" ended it
        lines = piece.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if offset <= count and (end is None or count < end):
                take(line)
            if i + 1 < len(lines) or (line[-1] in _BREAKS and line[-1] != "\r"):
                count, pending = count + 1, False
            else:  # the piece ends inside a line, or on a "\r"
                pending, last = True, line[-1]
    count += pending
    return Recall(ref, "".join(out), offset, count, unit, clipped)


def file_pieces(path: Any, size: int = 1 << 20) -> Iterator[str]:
    """A UTF-8 file's text in pieces, decoded incrementally (as the archive wrote it)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogatepass")
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield decoder.decode(chunk)
    yield decoder.decode(b"", final=True)


def bounded(got: Recall, max_chars: int) -> Recall:
    """A slice of at most ``max_chars`` characters: a read by lines keeps the whole lines that
    fit (next_offset is the first one left out); a first line longer than that is cut, and
    the slice says so (``clipped``: read that line by chars)."""
    if len(got.text) <= max_chars:
        return got
    if got.unit == "chars":
        return replace(got, text=got.text[:max_chars])
    end = got.text.rfind("\n", 0, max_chars)
    if end < 0:
        return replace(got, text=got.text[:max_chars], clipped=True)
    return replace(got, text=got.text[: end + 1])


class Listing(list[dict[str, Any]]):
    """A session's archives, oldest first; ``damaged`` counts the records skipped because
    they were torn (by a crash mid-write): they were never acknowledged."""

    damaged: int = 0


class Hits(list[dict[str, Any]]):
    """Search hits; ``truncated`` when the search stopped at its scan bound; ``damaged``
    counts the archived records it skipped because they were torn (by a crash mid-write)."""

    truncated: bool = False
    damaged: int = 0


class Search:
    """One search of a session's archive: a pattern run by RE2, a linear-time engine, so
    that no pattern can make a search backtrack; and a bounded scan, in bytes and in time.
    The REST search and the model's ``context_search`` share it."""

    def __init__(self, pattern: Any, max_results: int) -> None:
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
            raise OffloadError(f"a search pattern is a regular expression of 1-{MAX_PATTERN} characters")
        options = re2.Options()
        options.log_errors = False
        options.max_mem = 8 << 20
        options.never_nl = True  # a match stays within one line
        try:
            self.regex = re2.compile(b"(?m)" + pattern.encode("utf-8"), options)
        except (re2.error, UnicodeError) as exc:
            first = exc.args[0] if exc.args else exc
            reason = first.decode(errors="replace") if isinstance(first, bytes) else first
            raise OffloadError(
                f"invalid regular expression: {reason} (RE2 syntax: no backreferences or lookaround)"
            ) from None
        self.max_results = max_results
        self.hits = Hits()
        self.scanned = 0
        self.deadline = time.monotonic() + SEARCH_SECONDS

    def done(self) -> bool:
        """Whether the search has all its results, or has used up its scan."""
        if len(self.hits) >= self.max_results:
            return True
        if self.scanned > SEARCH_BYTES or time.monotonic() > self.deadline:
            self.hits.truncated = True
            return True
        return False

    def scan(self, ref: str, text: str) -> bool:
        """Add the lines of ``text`` that match; True once the search is done. An archived
        batch of messages (``m-``) is searched in its messages' text as the model saw it
        (content, then tool-call arguments), not in its JSON: a hit names the message."""
        for message, body in _searchable(ref, text):
            data = body.encode("utf-8", "surrogatepass")
            room = SEARCH_BYTES - self.scanned
            if len(data) > room:
                data, self.hits.truncated = data[: max(0, room)], True
            self.scanned += len(data)
            pos = counted = line = 0
            while pos <= len(data):
                found = self.regex.search(data, pos)
                if found is None:
                    break
                start = data.rfind(b"\n", 0, found.start()) + 1
                line += data.count(b"\n", counted, start)
                counted = start
                end = data.find(b"\n", found.end())
                end = len(data) if end < 0 else end
                shown = data[start : min(end, start + 1200)].decode(errors="replace")[:300]
                hit: dict[str, Any] = {"ref": ref, "line": line, "text": shown}
                if message is not None:
                    hit["message"] = message
                self.hits.append(hit)
                if len(self.hits) >= self.max_results:
                    return True
                pos = end + 1
            if self.done():
                return True
        return False


def _searchable(ref: str, text: str) -> list[tuple[int | None, str]]:
    """(message index or None, text) pairs to search."""
    if not ref.startswith("m-"):
        return [(None, text)]
    try:
        messages = json.loads(text)
    except ValueError:
        return [(None, text)]
    if not isinstance(messages, list):
        return [(None, text)]
    out: list[tuple[int | None, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        calls = [c.get("function") or {} for c in m.get("tool_calls") or () if isinstance(c, dict)]
        args = [f"{fn.get('name')}({fn.get('arguments')})" for fn in calls if isinstance(fn, dict)]
        # A converted message's documents and server tool results (see ctxmgmt.formats).
        hidden = m.get(HIDDEN)
        texts = [text_of(m.get("content")), *args]
        if isinstance(hidden, dict):
            counted = hidden.get("counted_text")
            texts += [counted] if isinstance(counted, str) else []
            texts += _strings(hidden.get("source"))
        out.append((i, "\n".join(texts)))
    return out


_NOT_TEXT = frozenset({"data", "signature", "encrypted_content"})
"""Fields of provider blocks that hold encoded data, not text worth searching."""


def _strings(value: Any, depth: int = 0) -> list[str]:
    """The texts in a provider block (a search result's, a server tool's), without its data."""
    if isinstance(value, str):
        return [value]
    if depth > 16:
        return []
    if isinstance(value, dict):
        return [t for k, v in value.items() if k not in _NOT_TEXT for t in _strings(v, depth + 1)]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v, depth + 1)]
    return []


class Offloader(Archive, Protocol):
    """An offload store: the engine's :class:`~ctxmgmt.archive.Archive` (write, read back
    exactly; every write durable when it returns), plus what the recall tools, the REST API
    and ``ctxmgmt gc`` use."""

    def search(self, session: str, pattern: str, *, max_results: int = 20) -> Hits: ...

    def list(self, session: str) -> Listing: ...

    def delete(self, session: str) -> int: ...

    def gc(self, max_age_seconds: float) -> GcReport: ...


class ArchiveStream(Protocol):
    """One tool result archived as it streams: :meth:`write` its text piece by piece, then
    :meth:`commit` (durable, and readable by ``ref`` from then on) or :meth:`abort` (nothing
    is left). Each call may block on disk or the database: call it off the event loop."""

    ref: str

    def write(self, text: str) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...


@runtime_checkable
class StreamWriter(Protocol):
    """A store that archives a tool result as it streams, without holding it whole."""

    def open_tool_result(self, session: str, *, tool_call_id: str | None = None) -> ArchiveStream: ...


BUFFERED_BYTES = 16 * 1024 * 1024
"""What a store that cannot stream is given at most: the stream is buffered whole first."""


class _Buffered:
    """The stream of a store that only writes whole archives: buffered, up to a bound."""

    def __init__(self, store: Any, session: str, tool_call_id: str | None) -> None:
        session_key(session)
        self.store, self.session, self.tool_call_id = store, session, tool_call_id
        self.parts: list[str] = []
        self.size = 0
        self.ref = ""

    def write(self, text: str) -> None:
        self.size += len(text)
        if self.size > BUFFERED_BYTES:
            raise OffloadError(f"this offload store takes no archive over {BUFFERED_BYTES:,} characters")
        self.parts.append(text)

    def commit(self) -> None:
        text, self.parts = "".join(self.parts), []
        self.ref = self.store.store_tool_result(self.session, text, tool_call_id=self.tool_call_id)

    def abort(self) -> None:
        self.parts = []


def open_stream(store: Any, session: str, *, tool_call_id: str | None = None) -> ArchiveStream:
    """A stream archiving one tool result into ``store``: its own, or a bounded buffer for a
    store that writes whole archives only."""
    if isinstance(store, StreamWriter):
        return store.open_tool_result(session, tool_call_id=tool_call_id)
    return _Buffered(store, session, tool_call_id)


# What the engine archives through moved to ctxmgmt.archive.
__getattr__ = moved(
    __name__,
    _archive.__name__,
    names=("Batch", "BatchWriter", "Item", "item_text", "new_ref", "slice_text"),
)
