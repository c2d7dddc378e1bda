"""The proxy's conversations: each one's managed state, shared by every process on the store."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy import JSON, Connection, Engine, Text, cast, delete, select, type_coerce
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

    @contextmanager
    def _tx(self, conn: Connection | None) -> Iterator[Connection]:
        """``conn`` (a caller's transaction), else a transaction of its own."""
        if conn is not None:
            yield conn
            return
        with self.engine.begin() as own:
            yield own

    def get(self, key: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(proxy_sessions.c.state).where(proxy_sessions.c.session_key == key)
            ).first()
        return dict(row.state) if row is not None and isinstance(row.state, Mapping) else None

    def put(self, key: str, state: Mapping[str, Any], *, conn: Connection | None = None) -> bool:
        """Store a state (in ``conn``'s transaction when given); False, and the key forgotten,
        when it is over MAX_SESSION_BYTES. The state is written as JSON once: the text measured
        is the text stored."""
        text = json.dumps(state, ensure_ascii=False)
        with self._tx(conn) as tx:
            if len(text.encode()) > MAX_SESSION_BYTES:
                tx.execute(delete(proxy_sessions).where(proxy_sessions.c.session_key == key))
                return False
            postgres = self.engine.dialect.name == "postgresql"
            written = type_coerce(text, Text)  # the text as it is, not dumped again by the JSON type
            values = {"updated_time": now_ms(), "state": cast(written, JSON) if postgres else written}
            insert = (pg_insert if postgres else sqlite_insert)(proxy_sessions)
            tx.execute(
                insert.values(session_key=key, **values).on_conflict_do_update(
                    index_elements=[proxy_sessions.c.session_key], set_=values
                )
            )
        return True

    def drop(self, key: str) -> None:
        with self._tx(None) as tx:
            tx.execute(delete(proxy_sessions).where(proxy_sessions.c.session_key == key))

    def gc(self, max_age_seconds: float) -> int:
        """Forget the conversations not seen for this long; how many went."""
        cutoff = now_ms() - int(max_age_seconds * 1000)
        with self._tx(None) as tx:
            result = tx.execute(delete(proxy_sessions).where(proxy_sessions.c.updated_time < cutoff))
            return int(result.rowcount or 0)
