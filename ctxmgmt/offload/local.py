"""The local workspace backend: a folder per session under one root.

- archives (tool results and batches of removed messages) are appended to the session's
  ``messages.jsonl`` under an exclusive lock, without rewriting the file, then indexed in
  ``index.jsonl``: one write and one fsync for each of the two files per batch, however many
  archives it holds. An index entry records where its line starts, so a read does not scan;
- tool results written by earlier versions, one file each (``t-<id>.txt``), read as before;
- a tool result archived as it streams (:meth:`LocalOffloader.open_tool_result`): a file of
  its own too, written to a temporary file (``t-<id>.tmp.txt``), then fsynced, renamed and
  indexed, so that it is never held whole in memory and is readable only once whole.

Every path is built from store-generated names only and checked to stay inside the root.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
import zlib
from pathlib import Path
from typing import Any, Literal

from ..archive import Item, Recall, item_text, new_ref, session_key, slice_text
from .base import (
    REF,
    SEARCH_BYTES,
    STREAM_BYTES,
    GcReport,
    Hits,
    Listing,
    OffloadError,
    Search,
    check_ref,
    file_pieces,
    slice_stream,
)

__all__ = ["LocalOffloader"]

_BATCHES = "messages.jsonl"
_INDEX = "index.jsonl"


class LocalOffloader:
    """Archives removed content in files under ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def _session_dir(self, session: str, *, create: bool) -> Path:
        path = (self.root / session_key(session)).resolve()
        if path.parent != self.root:
            raise OffloadError("refusing a path outside the offload root")
        if create:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OffloadError(f"cannot create the session folder: {exc.strerror}") from None
        return path

    def _inside(self, folder: Path, name: str) -> Path:
        path = (folder / name).resolve()
        if path.parent != folder:
            raise OffloadError("refusing a path outside the offload root")
        return path

    # -- writes ----------------------------------------------------------------------
    def store_tool_result(self, session: str, content: str, *, tool_call_id: str | None = None) -> str:
        item = Item(new_ref("tool_result"), "tool_result", content, tool_call_id)
        self.write_batch(session, [item])
        return item.ref

    def store_messages(self, session: str, messages: list[dict[str, Any]]) -> str:
        item = Item(new_ref("messages"), "messages", messages)
        self.write_batch(session, [item])
        return item.ref

    def open_tool_result(self, session: str, *, tool_call_id: str | None = None) -> _FileStream:
        """A tool result archived as it streams (see the module's docstring)."""
        folder = self._session_dir(session, create=True)
        return _FileStream(self, folder, new_ref("tool_result"), tool_call_id)

    def write_batch(self, session: str, items: list[Item]) -> int:
        """Append every item to the session's archive file, then their index entries: one
        write and one fsync each, whatever the number of items. Returns the torn records
        (from an earlier crash) closed off on the way."""
        if not items:
            return 0
        folder = self._session_dir(session, create=True)
        lines = [_line(item) for item in items]
        try:
            offset, torn = self._append(folder, _BATCHES, b"".join(lines))
            entries = []
            now = time.time()
            for item, line in zip(items, lines, strict=True):
                entry: dict[str, Any] = {"ref": item.ref, "kind": item.kind, "offset": offset}
                if item.kind == "tool_result":
                    entry["tool_call_id"] = item.tool_call_id
                else:
                    entry["count"] = len(item.content)
                entries.append({**entry, "bytes": len(line), "time": now})
                offset += len(line)
            data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries)
            torn += self._append(folder, _INDEX, data.encode("utf-8", "surrogatepass"))[1]
        except OSError as exc:
            raise OffloadError(f"cannot write the archive: {exc.strerror or exc}") from None
        return torn

    def _append(self, folder: Path, name: str, data: bytes) -> tuple[int, int]:
        """Append whole lines under an exclusive lock; returns the byte offset where they
        start, and 1 if a torn tail had to be closed first (else 0).

        The lines are acknowledged only once they are whole and durable: a short write or an
        error (a full disk) truncates the file back to where they started and raises.
        A torn tail left by a crash is closed with a newline first, so that it never merges
        with the next record; readers skip lines that do not parse."""
        path = self._inside(folder, name)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            start = offset = os.lseek(fd, 0, os.SEEK_END)
            torn = 1 if offset and os.pread(fd, 1, offset - 1) != b"\n" else 0
            if torn:
                data = b"\n" + data  # close a torn tail
                offset += 1
            try:
                written = 0
                while written < len(data):
                    n = os.write(fd, data[written:])
                    if n <= 0:
                        raise OSError(errno.EIO, "short write")
                    written += n
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, start)
                raise
            if not start:  # a new file: its name, and its session folder's, are durable too
                _fsync_dir(folder)
                _fsync_dir(folder.parent)
            return offset, torn
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- reads -----------------------------------------------------------------------
    def _index(self, folder: Path) -> tuple[list[dict[str, Any]], int]:
        """The session's index entries, and how many torn lines were skipped."""
        path = self._inside(folder, _INDEX)
        entries: list[dict[str, Any]] = []
        torn = 0
        if not path.exists():
            return entries, torn
        with open(path, "rb") as f:
            for line in f:
                entry = _record(line)
                ref = entry.get("ref") if isinstance(entry, dict) else None
                if isinstance(entry, dict) and isinstance(ref, str) and REF.fullmatch(ref):
                    entries.append(entry)
                elif line.strip():
                    torn += 1
        return entries, torn

    def _content(self, folder: Path, ref: str, index: dict[str, dict[str, Any]] | None = None) -> str:
        if index is None:
            index = {e["ref"]: e for e in self._index(folder)[0]}
        entry = index.get(ref)
        if ref.startswith("t-") and (entry is None or "offset" not in entry):
            # Written before batched archives: a file of its own.
            path = self._inside(folder, f"{ref}.txt")
            try:
                return path.read_bytes().decode("utf-8", "surrogatepass")
            except FileNotFoundError:
                raise OffloadError(f"no stored content {ref} in this session") from None
        if entry is None:
            raise OffloadError(f"no stored content {ref} in this session")
        with open(self._inside(folder, _BATCHES), "rb") as f:
            f.seek(int(entry["offset"]))
            body = _framed(f)
        if body is None or body[0] != ref:
            raise OffloadError(f"the archive of {ref} is damaged (a torn write); the others are whole")
        return body[1]

    def read(
        self,
        session: str,
        ref: str,
        *,
        offset: int = 0,
        limit: int | None = None,
        unit: Literal["chars", "lines"] = "chars",
    ) -> Recall:
        ref = check_ref(ref)
        folder = self._session_dir(session, create=False)
        if not folder.is_dir():
            raise OffloadError(f"no stored content {ref} in this session")
        large = self._large(folder, ref)
        if large is not None:  # a streamed tool output: read in pieces, never whole
            return slice_stream(ref, file_pieces(large), offset, limit, unit)
        return slice_text(ref, self._content(folder, ref), offset, limit, unit)

    def _large(self, folder: Path, ref: str) -> Path | None:
        """The file of an archive that has one of its own and is larger than STREAM_BYTES."""
        if not ref.startswith("t-"):
            return None
        path = self._inside(folder, f"{ref}.txt")
        try:
            info = path.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        return path if stat.S_ISREG(info.st_mode) and info.st_size > STREAM_BYTES else None

    def search(self, session: str, pattern: str, *, max_results: int = 20) -> Hits:
        search = Search(pattern, max_results)
        folder = self._session_dir(session, create=False)
        if not folder.is_dir():
            return search.hits
        entries, search.hits.damaged = self._index(folder)  # read once, not once per archive
        index = {e["ref"]: e for e in entries}
        for entry in entries:
            large = self._large(folder, entry["ref"])
            if large is not None:  # no more than the search may still scan is read
                room = max(0, SEARCH_BYTES - search.scanned)
                with open(large, "rb") as f:
                    head = f.read(room + 1)
                text = head.decode("utf-8", "ignore")  # a character cut at the end is dropped
                if search.scan(entry["ref"], text):
                    break
                continue
            try:
                text = self._content(folder, entry["ref"], index)
            except OffloadError as exc:  # torn, or collected by gc since it was indexed
                search.hits.damaged += "damaged" in str(exc)
                continue
            if search.scan(entry["ref"], text):
                break
        return search.hits

    def list(self, session: str) -> Listing:
        folder = self._session_dir(session, create=False)
        listing = Listing()
        if folder.is_dir():
            entries, listing.damaged = self._index(folder)
            listing.extend(entries)
        return listing

    def delete(self, session: str) -> int:
        folder = self._session_dir(session, create=False)
        freed = 0
        if folder.is_dir() and not folder.is_symlink():
            for entry in _entries(folder):
                # A link is removed as a link: what it points to is never touched.
                freed += entry.stat(follow_symlinks=False).st_size
                os.unlink(entry.path)
            folder.rmdir()
        return freed

    def gc(self, max_age_seconds: float) -> GcReport:
        """Delete every artifact older than ``max_age_seconds``; whole sessions when all is old.
        Only regular files in session folders are deleted: links are never followed, and
        anything else is left alone and reported."""
        cutoff = time.time() - max_age_seconds
        files = freed = 0
        skipped: list[str] = []
        if not self.root.is_dir():
            return GcReport()
        for folder in _entries(self.root):
            if not folder.is_dir(follow_symlinks=False) or len(folder.name) != 40:
                skipped.append(folder.name)
                continue
            entries = _entries(folder.path)
            regular = [e for e in entries if e.is_file(follow_symlinks=False)]
            skipped += [f"{folder.name}/{e.name}" for e in entries if not e.is_file(follow_symlinks=False)]
            newest = max((e.stat(follow_symlinks=False).st_mtime for e in regular), default=0.0)
            for entry in regular:
                info = entry.stat(follow_symlinks=False)
                # Tool results go one by one; the shared JSONL files only with their session.
                if info.st_mtime < cutoff and (entry.name.endswith(".txt") or newest < cutoff):
                    freed += info.st_size
                    os.unlink(entry.path)
                    files += 1
            if not _entries(folder.path):
                os.rmdir(folder.path)
        return GcReport(files=files, bytes=freed, skipped=tuple(skipped))


class _FileStream:
    """One streamed tool result: a temporary file, renamed into place and indexed on commit."""

    def __init__(self, store: LocalOffloader, folder: Path, ref: str, tool_call_id: str | None) -> None:
        self.ref = ref
        self._store, self._folder, self._tool_call_id = store, folder, tool_call_id
        self._tmp = store._inside(folder, f"{ref}.tmp.txt")
        self._bytes = 0
        try:
            self._fd: int | None = os.open(
                self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
        except OSError as exc:
            raise OffloadError(f"cannot write the archive: {exc.strerror or exc}") from None

    def write(self, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        if self._fd is None:
            raise OffloadError("the archive is closed")
        try:
            view = memoryview(data)
            while view:
                n = os.write(self._fd, view)
                if n <= 0:
                    raise OSError(errno.EIO, "short write")
                view = view[n:]
        except OSError as exc:
            self.abort()
            raise OffloadError(f"cannot write the archive: {exc.strerror or exc}") from None
        self._bytes += len(data)

    def commit(self) -> None:
        """Durable, then visible: fsync, rename into place, fsync the folder, index it."""
        if self._fd is None:
            raise OffloadError("the archive is closed")
        final = self._store._inside(self._folder, f"{self.ref}.txt")
        try:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
            os.rename(self._tmp, final)
            _fsync_dir(self._folder)
            entry = {
                "ref": self.ref,
                "kind": "tool_result",
                "tool_call_id": self._tool_call_id,
                "file": True,
                "bytes": self._bytes,
                "time": time.time(),
            }
            line = json.dumps(entry, ensure_ascii=False) + "\n"
            self._store._append(self._folder, _INDEX, line.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            self.abort()
            with contextlib.suppress(OSError):
                os.unlink(final)
            raise OffloadError(f"cannot write the archive: {exc.strerror or exc}") from None

    def abort(self) -> None:
        """Nothing of it is left."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        with contextlib.suppress(OSError):
            os.unlink(self._tmp)


def _line(item: Item) -> bytes:
    """An archive record: a header line (reference, size and CRC-32 of the body), then the
    body as ``read`` returns it, byte for byte, then a newline. A tool result's text is
    stored as it is, with no escaping, so a 10 MB result costs a copy, not an encode."""
    body = item_text(item).encode("utf-8", "surrogatepass")
    header = json.dumps({"ref": item.ref, "bytes": len(body), "crc32": zlib.crc32(body)})
    return b"".join((header.encode(), b"\n", body, b"\n"))


def _framed(f: Any) -> tuple[str, str] | None:
    """The (reference, text) of the record where ``f`` stands, or None when it is torn."""
    head = _record(f.readline())
    if not isinstance(head, dict) or not isinstance(head.get("ref"), str):
        return None
    if "messages" in head:  # a record of an earlier version: the whole batch on one line
        return head["ref"], item_text(Item(head["ref"], "messages", head["messages"]))
    size = head.get("bytes")
    if not isinstance(size, int) or size < 0:
        return None
    body = f.read(size + 1)
    if len(body) != size + 1 or body[-1:] != b"\n" or zlib.crc32(body[:-1]) != head.get("crc32"):
        return None
    return head["ref"], body[:-1].decode("utf-8", "surrogatepass")


def _record(line: bytes) -> Any | None:
    """A JSONL record, or None for a torn or damaged line."""
    if not line.endswith(b"\n"):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def _entries(folder: str | os.PathLike[str]) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return list(it)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
