"""The SQL backend: offloaded content in the registry's database, shared by instances.

A tool result archived as it streams (:meth:`SQLOffloader.open_tool_result`) is written in
parts, each row in its own short transaction under a key no session has; on commit one
transaction joins them in the database into the archive's row and deletes them, so the
result is never held whole by this process (on SQLite the join runs inside the process's
SQLite library). Parts left by a crash are collected by ``gc``."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Literal

from sqlalchemy import Engine, delete, func, select, text
from sqlalchemy.exc import SQLAlchemyError

from ..archive import Item, Recall, item_text, new_ref, session_key, slice_text
from ..store.models import offload
from .base import (
    GcReport,
    Hits,
    Listing,
    OffloadError,
    Search,
    check_ref,
)

__all__ = ["SQLOffloader"]


class SQLOffloader:
    """Archives removed content in the ``offload`` table (run the migrations first)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def write_batch(self, session: str, items: list[Item]) -> int:
        """Insert every item in one transaction: all are acknowledged, or none."""
        if not items:
            return 0
        key = session_key(session)
        now = int(time.time() * 1000)
        rows = [
            {
                "ref": item.ref,
                "session_key": key,
                "kind": item.kind,
                "content": item_text(item),
                "meta": (
                    {"tool_call_id": item.tool_call_id}
                    if item.kind == "tool_result"
                    else {"count": len(item.content)}
                ),
                "created_time": now,
            }
            for item in items
        ]
        try:
            with self.engine.begin() as conn:
                conn.execute(offload.insert(), rows)
        except (SQLAlchemyError, ValueError) as exc:  # psycopg refuses NUL in text: a ValueError
            raise OffloadError(f"cannot write to the offload table: {type(exc).__name__}") from None
        return 0

    def open_tool_result(self, session: str, *, tool_call_id: str | None = None) -> _RowStream:
        """A tool result archived as it streams (see the module's docstring)."""
        return _RowStream(self.engine, session_key(session), new_ref("tool_result"), tool_call_id)

    def store_tool_result(self, session: str, content: str, *, tool_call_id: str | None = None) -> str:
        item = Item(new_ref("tool_result"), "tool_result", content, tool_call_id)
        self.write_batch(session, [item])
        return item.ref

    def store_messages(self, session: str, messages: list[dict[str, Any]]) -> str:
        item = Item(new_ref("messages"), "messages", messages)
        self.write_batch(session, [item])
        return item.ref

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
        with self.engine.connect() as conn:
            content = conn.execute(
                select(offload.c.content).where(
                    offload.c.ref == ref, offload.c.session_key == session_key(session)
                )
            ).scalar()
        if content is None:
            raise OffloadError(f"no stored content {ref} in this session")
        return slice_text(ref, content, offset, limit, unit)

    def search(self, session: str, pattern: str, *, max_results: int = 20) -> Hits:
        search = Search(pattern, max_results)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(offload.c.ref, offload.c.content)
                .where(offload.c.session_key == session_key(session))
                .order_by(offload.c.created_time, offload.c.ref)
            )
            for ref, content in rows:
                if search.scan(ref, content):
                    break
        return search.hits

    def list(self, session: str) -> Listing:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(
                    offload.c.ref,
                    offload.c.kind,
                    offload.c.meta,
                    offload.c.created_time,
                    func.length(offload.c.content).label("chars"),
                )
                .where(offload.c.session_key == session_key(session))
                .order_by(offload.c.created_time, offload.c.ref)
            ).all()
        return Listing(
            {"ref": r.ref, "kind": r.kind, "chars": r.chars, "time": r.created_time / 1000, **(r.meta or {})}
            for r in rows
        )

    def delete(self, session: str) -> int:
        with self.engine.begin() as conn:
            return int(
                conn.execute(delete(offload).where(offload.c.session_key == session_key(session))).rowcount
            )

    def gc(self, max_age_seconds: float) -> GcReport:
        cutoff = int((time.time() - max_age_seconds) * 1000)
        with self.engine.begin() as conn:
            size = conn.execute(
                select(func.coalesce(func.sum(func.length(offload.c.content)), 0)).where(
                    offload.c.created_time < cutoff
                )
            ).scalar_one()
            rows = conn.execute(delete(offload).where(offload.c.created_time < cutoff)).rowcount
        return GcReport(rows=int(rows), bytes=int(size))


PARTS = "~"
"""The first character of the key that holds a streamed archive's parts (a session's key is
hex): no session's list, read or search ever sees them."""


class _RowStream:
    """One streamed tool result: rows of parts, joined into one row on commit."""

    def __init__(self, engine: Engine, key: str, ref: str, tool_call_id: str | None) -> None:
        self.ref = ref
        self._engine, self._key, self._tool_call_id = engine, key, tool_call_id
        self._parts_key = PARTS + key[1:]
        self._n = 0

    def write(self, content: str) -> None:
        self._n += 1
        if self._n > 99_999:
            raise OffloadError("the archive has too many parts")
        row = {
            "ref": f"{self.ref}.{self._n:05d}",
            "session_key": self._parts_key,
            "kind": "part",
            "content": content,
            "meta": None,
            "created_time": int(time.time() * 1000),
        }
        self._run(lambda conn: conn.execute(offload.insert(), [row]))

    def commit(self) -> None:
        """One transaction: the parts joined into the archive's row, and deleted."""
        meta = ":meta"
        if self._engine.dialect.name == "postgresql":
            joined = "coalesce((SELECT string_agg(content, '' ORDER BY ref) FROM offload WHERE {w}), '')"
            meta = "CAST(:meta AS json)"
        else:  # SQLite: an ordered subquery feeds group_concat in its order
            joined = (
                "coalesce((SELECT group_concat(content, '') FROM "
                "(SELECT content FROM offload WHERE {w} ORDER BY ref)), '')"
            )
        where = "session_key = :parts AND ref LIKE :prefix"
        insert = text(
            "INSERT INTO offload (ref, session_key, kind, content, meta, created_time) "
            f"VALUES (:ref, :key, 'tool_result', {joined.format(w=where)}, {meta}, :now)"
        )
        params = {
            "ref": self.ref,
            "key": self._key,
            "parts": self._parts_key,
            "prefix": f"{self.ref}.%",
            "meta": json.dumps({"tool_call_id": self._tool_call_id}),
            "now": int(time.time() * 1000),
        }

        def join(conn: Any) -> None:
            conn.execute(insert, params)
            conn.execute(text(f"DELETE FROM offload WHERE {where}"), params)

        try:
            self._run(join)
        except OffloadError:
            self.abort()
            raise

    def abort(self) -> None:
        """Nothing of it is left (a failure here leaves parts for gc)."""
        params = {"parts": self._parts_key, "prefix": f"{self.ref}.%"}
        with contextlib.suppress(OffloadError):
            self._run(
                lambda conn: conn.execute(
                    text("DELETE FROM offload WHERE session_key = :parts AND ref LIKE :prefix"), params
                )
            )

    def _run(self, work: Any) -> None:
        try:
            with self._engine.begin() as conn:
                work(conn)
        except (SQLAlchemyError, ValueError) as exc:  # psycopg refuses NUL in text: a ValueError
            raise OffloadError(f"cannot write to the offload table: {type(exc).__name__}") from None
