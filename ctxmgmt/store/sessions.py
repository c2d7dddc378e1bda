"""The proxy's conversations: each one's managed state, shared by every process on the store."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import JSON, Connection, Engine, Text, bindparam, cast, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from .models import proxy_sessions
from .repository import now_ms

__all__ = ["MAX_SESSION_BYTES", "SessionStore"]

MAX_SESSION_BYTES = 16 << 20
"""A larger state is not kept: the next request of that conversation starts a new view (as
a new conversation would), which costs the prompt cache one rewrite, never correctness."""


def _upsert(insert: Any, postgres: bool) -> Any:
    """Insert or replace a state; it is bound as the JSON text dumped once (never dumped again
    by the column's type)."""
    written = bindparam("state", type_=Text)
    values = {"updated_time": bindparam("updated"), "state": cast(written, JSON) if postgres else written}
    return (
        insert(proxy_sessions)
        .values(session_key=bindparam("key"), **values)
        .on_conflict_do_update(index_elements=[proxy_sessions.c.session_key], set_=values)
    )


# Built once: each call only binds its values (each is compiled once per engine).
_UPSERT = {"postgresql": _upsert(pg_insert, True), "sqlite": _upsert(sqlite_insert, False)}
_GET_MANY = select(proxy_sessions.c.session_key, proxy_sessions.c.state, proxy_sessions.c.updated_time).where(
    proxy_sessions.c.session_key.in_(bindparam("keys", expanding=True))
)


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

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[dict[str, Any], int]]:
        """The states stored under any of ``keys``: ``{key: (state, updated_time)}``."""
        with self.engine.connect() as conn:
            rows = conn.execute(_GET_MANY, {"keys": list(keys)}).all()
        return {
            row.session_key: (dict(row.state), int(row.updated_time))
            for row in rows
            if isinstance(row.state, Mapping)
        }

    def put(self, key: str, state: Mapping[str, Any], *, conn: Connection | None = None) -> bool:
        """Store a state (in ``conn``'s transaction when given); False, and the key forgotten,
        when it is over MAX_SESSION_BYTES. The state is written as JSON once: the text measured
        is the text stored."""
        text = json.dumps(state, ensure_ascii=False)
        with self._tx(conn) as tx:
            if len(text.encode()) > MAX_SESSION_BYTES:
                tx.execute(delete(proxy_sessions).where(proxy_sessions.c.session_key == key))
                return False
            upsert = _UPSERT["postgresql" if self.engine.dialect.name == "postgresql" else "sqlite"]
            tx.execute(upsert, {"key": key, "updated": now_ms(), "state": text})
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
