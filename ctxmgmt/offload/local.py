"""The local workspace backend: a folder per session under one root.

- each tool result is its own file, written atomically (temporary file, fsync, rename);
- removed messages are appended to the session's ``messages.jsonl`` under an
  exclusive lock, without rewriting the file; a batch reference records where its
  line starts, so reading it back does not scan the file.

Every path is built from store-generated names only and checked to stay inside the root.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Literal

from .base import (
    REF,
    GcReport,
    Hits,
    OffloadError,
    Recall,
    Search,
    check_ref,
    session_key,
    slice_text,
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
        ref = f"t-{uuid.uuid4().hex}"
        folder = self._session_dir(session, create=True)
        target = self._inside(folder, f"{ref}.txt")
        data = content.encode("utf-8", "surrogatepass")
        try:
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)  # a buffered write writes everything or raises
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
                _fsync_dir(folder)  # the rename itself is durable
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            self._append(
                folder,
                _INDEX,
                {
                    "ref": ref,
                    "kind": "tool_result",
                    "tool_call_id": tool_call_id,
                    "bytes": len(data),
                    "time": time.time(),
                },
            )
        except OSError as exc:
            raise OffloadError(f"cannot write the tool result: {exc.strerror or exc}") from None
        return ref

    def store_messages(self, session: str, messages: list[dict[str, Any]]) -> str:
        ref_id = uuid.uuid4().hex
        folder = self._session_dir(session, create=True)
        line = json.dumps({"ref": f"m-{ref_id}", "messages": messages}, ensure_ascii=False) + "\n"
        try:
            offset = self._append(folder, _BATCHES, line, raw=True)
            self._append(
                folder,
                _INDEX,
                {
                    "ref": f"m-{ref_id}",
                    "kind": "messages",
                    "offset": offset,
                    "count": len(messages),
                    "bytes": len(line.encode()),
                    "time": time.time(),
                },
            )
        except OSError as exc:
            raise OffloadError(f"cannot append the removed messages: {exc.strerror or exc}") from None
        return f"m-{ref_id}"

    def _append(self, folder: Path, name: str, record: Any, *, raw: bool = False) -> int:
        """Append one line under an exclusive lock; returns the byte offset where it starts.

        The line is acknowledged only once it is whole and durable: a short write or an
        error (a full disk) truncates the file back to where the line started and raises.
        A torn tail left by a crash is closed with a newline first, so that it never merges
        with the next record; readers skip lines that do not parse."""
        data = (record if raw else json.dumps(record, ensure_ascii=False) + "\n").encode(
            "utf-8", "surrogatepass"
        )
        path = self._inside(folder, name)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            offset = os.lseek(fd, 0, os.SEEK_END)
            if offset and os.pread(fd, 1, offset - 1) != b"\n":
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
                os.ftruncate(fd, offset - (1 if data[:1] == b"\n" and offset else 0))
                raise
            return offset
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- reads -----------------------------------------------------------------------
    def _index(self, folder: Path) -> list[dict[str, Any]]:
        path = self._inside(folder, _INDEX)
        if not path.exists():
            return []
        entries = []
        with open(path, "rb") as f:
            for line in f:
                entry = _record(line)
                if entry is not None:
                    entries.append(entry)
        return entries

    def _content(self, folder: Path, ref: str, index: dict[str, dict[str, Any]] | None = None) -> str:
        if ref.startswith("t-"):
            path = self._inside(folder, f"{ref}.txt")
            try:
                return path.read_bytes().decode("utf-8", "surrogatepass")
            except FileNotFoundError:
                raise OffloadError(f"no stored content {ref} in this session") from None
        if index is None:
            index = {str(e.get("ref")): e for e in self._index(folder)}
        entry = index.get(ref)
        if entry is None:
            raise OffloadError(f"no stored content {ref} in this session")
        with open(self._inside(folder, _BATCHES), "rb") as f:
            f.seek(int(entry["offset"]))
            record = _record(f.readline())
        if record is None or record.get("ref") != ref:
            raise OffloadError(f"the archive of {ref} is damaged (a torn write); the others are whole")
        return json.dumps(record["messages"], ensure_ascii=False, indent=1)

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
        return slice_text(ref, self._content(folder, ref), offset, limit, unit)

    def search(self, session: str, pattern: str, *, max_results: int = 20) -> Hits:
        search = Search(pattern, max_results)
        folder = self._session_dir(session, create=False)
        if not folder.is_dir():
            return search.hits
        entries = self._index(folder)  # read once, not once per archived batch
        index = {str(e.get("ref")): e for e in entries}
        for entry in entries:
            ref = entry.get("ref")
            if not isinstance(ref, str) or not REF.fullmatch(ref):
                continue
            try:
                text = self._content(folder, ref, index)
            except OffloadError:  # collected by gc since it was indexed
                continue
            if search.scan(ref, text):
                break
        return search.hits

    def list(self, session: str) -> list[dict[str, Any]]:
        folder = self._session_dir(session, create=False)
        return self._index(folder) if folder.is_dir() else []

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
