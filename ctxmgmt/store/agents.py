"""Registered agents and their conversation memory, next to the definitions."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from sqlalchemy import Engine, case, func, select

from .. import _resources
from ..errors import AgentError, Conflict, NotFound, Problem
from ..loader import escape
from .models import agents, memories, memory_messages
from .repository import now_ms

__all__ = ["AgentStore", "MemoryStore"]


def _schema_problems(body: Any) -> list[Problem]:
    validator = Draft202012Validator(_resources.schema("agent.schema.json"))
    problems = []
    for error in validator.iter_errors(body):
        pointer = "".join(f"/{escape(p)}" for p in error.absolute_path)
        if error.validator == "required":
            missing = [k for k in error.validator_value if k not in error.instance]
            problems += [Problem(f"{pointer}/{k}", "is required") for k in missing]
        else:
            problems.append(Problem(pointer, error.message))
    return problems


class AgentStore:
    """Agents as registered: the whole body is stored and returned, used fields or not."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def register(self, body: Mapping[str, Any], *, checks: Sequence[Problem] = ()) -> str:
        """Store a validated registration body and return its new agent id."""
        problems = [*_schema_problems(body), *checks]
        if problems:
            raise AgentError(problems)
        agent_id = uuid.uuid4().hex
        with self.engine.begin() as conn:
            conn.execute(
                agents.insert().values(
                    agent_id=agent_id,
                    name=body["name"],
                    body=dict(body),
                    context_management_name=body.get("context_management_name"),
                    created_time=now_ms(),
                )
            )
        return agent_id

    def get(self, agent_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(select(agents).where(agents.c.agent_id == agent_id)).first()
        if row is None:
            raise NotFound(f"no agent with id {agent_id!r}")
        return {**row.body, "agent_id": row.agent_id, "created_time": row.created_time}

    def replace(self, agent_id: str, body: Mapping[str, Any], *, checks: Sequence[Problem] = ()) -> None:
        """Replace an agent's registration with a validated body (its id and creation time stay)."""
        problems = [*_schema_problems(body), *checks]
        if problems:
            raise AgentError(problems)
        with self.engine.begin() as conn:
            updated = conn.execute(
                agents.update()
                .where(agents.c.agent_id == agent_id)
                .values(
                    name=body["name"],
                    body=dict(body),
                    context_management_name=body.get("context_management_name"),
                )
            ).rowcount
        if not updated:
            raise NotFound(f"no agent with id {agent_id!r}")

    def delete(self, agent_id: str) -> None:
        with self.engine.begin() as conn:
            if not conn.execute(agents.delete().where(agents.c.agent_id == agent_id)).rowcount:
                raise NotFound(f"no agent with id {agent_id!r}")

    def list(self, *, offset: int = 0, limit: int = 10) -> tuple[int, list[dict[str, Any]]]:
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(agents)).scalar_one()
            rows = conn.execute(
                select(agents).order_by(agents.c.created_time, agents.c.agent_id).offset(offset).limit(limit)
            ).all()
        return total, [{**r.body, "agent_id": r.agent_id, "created_time": r.created_time} for r in rows]


class MemoryStore:
    """Conversations by memory id, in their full original form, one row per message."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(self, agent_id: str) -> str:
        memory_id = uuid.uuid4().hex
        stamp = now_ms()
        with self.engine.begin() as conn:
            conn.execute(
                memories.insert().values(
                    memory_id=memory_id,
                    agent_id=agent_id,
                    state={},
                    length=0,
                    created_time=stamp,
                    last_modified=stamp,
                )
            )
        return memory_id

    def owner(self, memory_id: str) -> str:
        """The agent a memory belongs to."""
        with self.engine.connect() as conn:
            agent_id = conn.execute(
                select(memories.c.agent_id).where(memories.c.memory_id == memory_id)
            ).scalar()
        if agent_id is None:
            raise NotFound(f"no memory with id {memory_id!r}")
        return str(agent_id)

    def head(self, memory_id: str, agent_id: str) -> tuple[dict[str, Any], int, dict[str, Any], int]:
        """(state, length, calibration, last modified in ms) of a memory of this agent."""
        row = self._row(memory_id, agent_id, memories.c.state, memories.c.calibration)
        calibration = row.calibration if isinstance(row.calibration, dict) else {}
        return dict(row.state), row.length, calibration, row.last_modified

    def version(self, memory_id: str, agent_id: str) -> tuple[int, int]:
        """(length, last modified in ms) of a memory of this agent: every write changes the
        pair (the stamp grows at each write, even two in one millisecond)."""
        row = self._row(memory_id, agent_id)
        return row.length, row.last_modified

    def _row(self, memory_id: str, agent_id: str, *columns: Any) -> Any:
        """A memory's row of this agent: ``columns``, its length and its last-modified stamp."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(*columns, memories.c.length, memories.c.last_modified).where(
                    memories.c.memory_id == memory_id, memories.c.agent_id == agent_id
                )
            ).first()
        if row is None:
            raise NotFound(f"no memory {memory_id!r} for agent {agent_id!r}")
        return row

    def messages(self, memory_id: str, *, since: int = 0, until: int | None = None) -> list[dict[str, Any]]:
        """The stored messages from position ``since`` (up to ``until``), in order."""
        query = select(memory_messages.c.message).where(
            memory_messages.c.memory_id == memory_id, memory_messages.c.seq >= since
        )
        if until is not None:
            query = query.where(memory_messages.c.seq < until)
        with self.engine.connect() as conn:
            return [r.message for r in conn.execute(query.order_by(memory_messages.c.seq))]

    def load(self, memory_id: str, agent_id: str) -> tuple[list[dict[str, Any]], dict[str, Any], int]:
        """(messages, state, length) of a memory of this agent."""
        state, length, _, _ = self.head(memory_id, agent_id)
        return self.messages(memory_id, until=length), state, length

    def append(
        self,
        memory_id: str,
        messages: Sequence[Mapping[str, Any]],
        state: Mapping[str, Any] | None,
        *,
        expected_length: int,
        expected_modified: int | None = None,
        calibration: Mapping[str, Any] | None = None,
    ) -> int:
        """Add messages after the ``expected_length`` first ones, and save the state and the
        calibration (None keeps the stored one). A concurrent append to the same memory is a
        Conflict, never an interleaving; with ``expected_modified``, so is any other write
        since (a compaction keeps the length). Returns the memory's new last-modified stamp,
        which is later than the one before (see :meth:`version`)."""
        now = now_ms()
        stamp = case((memories.c.last_modified >= now, memories.c.last_modified + 1), else_=now)
        values: dict[str, Any] = {"length": expected_length + len(messages), "last_modified": stamp}
        if state is not None:
            values["state"] = dict(state)
        if calibration is not None:
            values["calibration"] = dict(calibration)
        with self.engine.begin() as conn:
            where = [memories.c.memory_id == memory_id, memories.c.length == expected_length]
            if expected_modified is not None:
                where.append(memories.c.last_modified == expected_modified)
            updated = conn.execute(
                memories.update().where(*where).values(**values).returning(memories.c.last_modified)
            ).first()
            if updated is None:
                raise Conflict(f"memory {memory_id!r} changed during this execution; execute again")
            if messages:
                conn.execute(
                    memory_messages.insert(),
                    [
                        {"memory_id": memory_id, "seq": expected_length + i, "message": dict(m)}
                        for i, m in enumerate(messages)
                    ],
                )
        return int(updated.last_modified)
