"""The SQL backend: offloaded content in the registry's database, shared by instances."""

from __future__ import annotations

import time
from typing import Any, Literal

from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from ..store.models import offload
from .base import (
    GcReport,
    Hits,
    Item,
    Listing,
    OffloadError,
    Recall,
    Search,
    check_ref,
    item_text,
    new_ref,
    session_key,
    slice_text,
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
        except SQLAlchemyError as exc:
            raise OffloadError(f"cannot write to the offload table: {type(exc).__name__}") from None
        return 0

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
