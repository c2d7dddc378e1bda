"""The proxy's conversations: each one's managed state, shared by every process on the store."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Engine, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from .models import proxy_sessions
from .repository import now_ms

__all__ = ["MAX_SESSION_BYTES", "SessionStore"]

MAX_SESSION_BYTES = 16 << 20
"""A larger state is not kept: the next request of that conversation starts a new view (as
a new conversation would), which costs the prompt cache one rewrite, never correctness."""


class SessionStore:
    """Saved conversation states by key, one row each, the newest write winning."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def get(self, key: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(proxy_sessions.c.state).where(proxy_sessions.c.session_key == key)
            ).first()
        return dict(row.state) if row is not None and isinstance(row.state, Mapping) else None

    def put(self, key: str, state: Mapping[str, Any], *, conn: Connection | None = None) -> bool:
        """Store a state (in ``conn``'s transaction when given); False, and the key forgotten,
        when it is over MAX_SESSION_BYTES."""
        if len(json.dumps(state, ensure_ascii=False).encode()) > MAX_SESSION_BYTES:
            if conn is None:
                self.drop(key)
            else:
                conn.execute(delete(proxy_sessions).where(proxy_sessions.c.session_key == key))
            return False
        values = {"updated_time": now_ms(), "state": dict(state)}
        insert = (pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert)(proxy_sessions)
        upsert = insert.values(session_key=key, **values).on_conflict_do_update(
            index_elements=[proxy_sessions.c.session_key], set_=values
        )
        if conn is not None:
            conn.execute(upsert)
        else:
            with self.engine.begin() as own:
                own.execute(upsert)
        return True

    def drop(self, key: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(delete(proxy_sessions).where(proxy_sessions.c.session_key == key))

    def gc(self, max_age_seconds: float) -> int:
        """Forget the conversations not seen for this long; how many went."""
        cutoff = now_ms() - int(max_age_seconds * 1000)
        with self.engine.begin() as conn:
            result = conn.execute(delete(proxy_sessions).where(proxy_sessions.c.updated_time < cutoff))
            return int(result.rowcount or 0)
