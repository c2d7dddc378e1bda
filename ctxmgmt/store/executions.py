"""Execution records: one per agent execution, beside the agents and their memory."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select

from ..errors import NotFound
from .models import executions
from .repository import now_ms

__all__ = ["SUMMARY_FIELDS", "ExecutionStore"]

SUMMARY_FIELDS = (
    "execution_id",
    "agent_id",
    "memory_id",
    "definition",
    "definition_version",
    "definition_source",
    "started_time",
    "ended_time",
    "status",
    "llm_calls",
    "max_request_tokens",
    "context_window",
)
"""What a listing shows of each record (the columns; the whole record is one more)."""
_INSERT = executions.insert()
"""Built once: each save only binds its values (the statement is compiled once per engine)."""


class ExecutionStore:
    """What each execution did, stored when it ends: one INSERT, whatever its size."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def save(self, record: Mapping[str, Any], *, conn: Connection | None = None) -> None:
        """Store a record (built by the runner: the summary fields and the rest), in
        ``conn``'s transaction when given."""
        values = {k: record.get(k) for k in SUMMARY_FIELDS}
        values["record"] = {k: v for k, v in record.items() if k not in SUMMARY_FIELDS}
        if conn is not None:
            conn.execute(_INSERT, values)
            return
        with self.engine.begin() as own:
            own.execute(_INSERT, values)

    def get(self, execution_id: str) -> dict[str, Any]:
        """The whole record of an execution."""
        with self.engine.connect() as conn:
            row = conn.execute(select(executions).where(executions.c.execution_id == execution_id)).first()
        if row is None:
            raise NotFound(f"no execution with id {execution_id!r}")
        return {**{k: getattr(row, k) for k in SUMMARY_FIELDS}, **row.record}

    def list(self, agent_id: str, *, offset: int = 0, limit: int = 10) -> tuple[int, list[dict[str, Any]]]:
        """(total, summaries) of an agent's executions, newest first."""
        where = executions.c.agent_id == agent_id
        columns = [getattr(executions.c, k) for k in SUMMARY_FIELDS]
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(executions).where(where)).scalar_one()
            rows = conn.execute(
                select(*columns)
                .where(where)
                .order_by(executions.c.started_time.desc(), executions.c.execution_id)
                .offset(offset)
                .limit(limit)
            ).all()
        return total, [dict(r._mapping) for r in rows]

    def gc(self, max_age_seconds: float) -> int:
        """Delete the records of executions that ended longer ago than this; how many went."""
        cutoff = now_ms() - int(max_age_seconds * 1000)
        with self.engine.begin() as conn:
            return int(conn.execute(delete(executions).where(executions.c.ended_time < cutoff)).rowcount or 0)
