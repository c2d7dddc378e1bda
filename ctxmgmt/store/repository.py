"""The definition repository: create, get, replace, delete, list, resolve.

Every write is validated first, so an invalid definition never reaches the table.
Create is atomic (the primary key decides a race), and replace with an expected
version is a compare-and-set in one UPDATE statement.
"""

from __future__ import annotations

import difflib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, case, create_engine, event, func, literal, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from ..definitions import Definition, Resolver
from ..errors import ConfigError, Conflict, DefinitionError, NotFound, Problem
from ..registry import ManagerRegistry
from ..validation import validate_definition
from .models import agents, retired_versions
from .models import definitions as table

__all__ = ["DEFAULT_DATABASE_URL", "DefinitionStore", "StoredDefinition", "connect", "migrate", "relaxed"]

DEFAULT_DATABASE_URL = "sqlite:///ctxmgmt.db"
DATABASE_ENV = "CTXMGMT_DATABASE_URL"
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_DURABLE = "FULL"


@contextmanager
def relaxed(engine: Engine) -> Iterator[Connection]:
    """A transaction for what may be lost at no harm once in a while (a proxied conversation's
    state, made again from the next request; an execution's record): committed when this
    returns and kept when the process dies, but its commit does not wait for the disk, so a
    crash of the machine may lose the last ones (never part of one). SQLite (in WAL mode):
    ``synchronous=NORMAL`` for it; PostgreSQL: ``synchronous_commit = off``."""
    with engine.connect() as conn:
        if engine.dialect.name != "sqlite":
            with conn.begin():
                conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                yield conn
            return
        # The driver's own connection: a pragma is refused inside a transaction, and these
        # two cost microseconds there (a statement and a commit each through the engine).
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.execute("PRAGMA synchronous=NORMAL")
        try:
            with conn.begin():
                yield conn
        except BaseException:
            _durable(conn, raw, failed=True)  # the transaction's own error is the one said
            raise
        _durable(conn, raw, failed=False)


def _durable(conn: Connection, raw: Any, *, failed: bool) -> None:
    """A relaxed connection made durable again, or closed: never back in the pool without it
    (a commit that failed may leave the driver in a transaction, where the pragma is refused).
    Either way what was committed stands: a failure here is no failure of the write."""
    try:
        raw.execute(f"PRAGMA synchronous={_DURABLE}")
    except Exception:
        conn.invalidate()
        if not failed:
            logging.getLogger(__name__).warning("a relaxed connection was closed", exc_info=True)


def connect(url: str | None = None) -> Engine:
    """An engine for a database URL: ``sqlite:///file.db`` or ``postgresql+psycopg://...``."""
    url = url or DEFAULT_DATABASE_URL
    if url.startswith("sqlite"):
        # Writers wait for each other instead of failing with "database is locked".
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA synchronous={_DURABLE}")  # a commit is on the disk when it returns
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    if url.startswith(("postgresql://", "postgres://")):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if not url.startswith("postgresql+psycopg://"):
        raise ConfigError(
            [
                Problem(
                    "/database_url",
                    f"{url.split('://', 1)[0]!r} databases are not supported; "
                    "use sqlite:///FILE or postgresql+psycopg://USER@HOST/DB",
                )
            ]
        )
    # No ping before each checkout (it doubled the round trips of a cached resolve): idle
    # connections are recycled, and reads retry once on a connection found dropped.
    return create_engine(url, pool_recycle=300, pool_size=10, max_overflow=20)


_T = TypeVar("_T")


def _read(method: Callable[..., _T]) -> Callable[..., _T]:
    """A read that runs again, once, when its pooled connection turns out to be dropped
    (a database restart, an idle connection cut by a firewall). Reads only: a write is
    never repeated, since it may have happened."""

    @functools.wraps(method)
    def run(*args: Any, **kwargs: Any) -> _T:
        try:
            return method(*args, **kwargs)
        except DBAPIError as exc:
            if not exc.connection_invalidated:
                raise
            return method(*args, **kwargs)

    return run


def migrate(engine: Engine) -> None:
    """Bring the database schema up to date (Alembic ``upgrade head``)."""
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@dataclass(frozen=True, slots=True)
class StoredDefinition:
    """A definition as stored, with its server-owned fields."""

    name: str
    description: str
    hooks: dict[str, Any]
    settings: dict[str, Any] | None
    version: int
    created_time: int
    last_modified: int
    created_by: str | None

    def document(self) -> dict[str, Any]:
        """The definition document (what was written)."""
        doc: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.settings:
            doc["settings"] = self.settings
        doc["hooks"] = self.hooks
        return doc

    def to_dict(self) -> dict[str, Any]:
        """The OpenSearch-shaped answer: the document plus version and timestamps."""
        return {
            **self.document(),
            "version": self.version,
            "created_time": self.created_time,
            "last_modified": self.last_modified,
            "created_by": self.created_by,
        }


class DefinitionStore:
    """Definitions in SQL, plus a cache of built definitions by name and version."""

    def __init__(self, engine: Engine, *, registry: ManagerRegistry | None = None) -> None:
        self.engine = engine
        self.resolver = Resolver(registry)
        self._byte_order = table.c.name.collate("C") if engine.dialect.name == "postgresql" else table.c.name
        # The cached resolve's one query, as the driver's own SQL: building and compiling a
        # statement each call cost as much as the round trip. Constant text; the name is bound.
        marker = "?" if engine.dialect.paramstyle == "qmark" else "%s"
        self._version_sql = f"SELECT version FROM {table.name} WHERE name = {marker}"

    @property
    def registry(self) -> ManagerRegistry | None:
        """The managers definitions are built with (None: the default registry)."""
        return self.resolver.registry

    @registry.setter
    def registry(self, registry: ManagerRegistry | None) -> None:
        self.resolver = Resolver(registry)  # what was built with the old one is not used

    @classmethod
    def open(cls, url: str | None = None, *, upgrade: bool = True) -> DefinitionStore:
        engine = connect(url)
        if upgrade:
            migrate(engine)
        return cls(engine)

    # -- writes ----------------------------------------------------------------------
    def _validated(self, name: str, document: Mapping[str, Any]) -> Definition:
        """The document stored under ``name``. A name in the document is checked like the
        rest of it, then the path's name is used: a file's name never renames a copy."""
        if "name" in document:
            problems = [p for p in validate_definition(dict(document)) if p.pointer == "/name"]
            if problems:
                raise DefinitionError(problems)
        return Definition.from_dict({**document, "name": name}, registry=self.registry)

    def create(
        self, name: str, document: Mapping[str, Any], *, created_by: str | None = None
    ) -> StoredDefinition:
        """Store a new definition. Raises Conflict when the name is taken."""
        definition = self._validated(name, document)
        stamp = now_ms()
        row = {
            "name": name,
            "description": definition.description,
            "hooks": definition.to_dict()["hooks"],
            "settings": dict(definition.settings) or None,
            "version": 1,
            "created_time": stamp,
            "last_modified": stamp,
            "created_by": created_by,
        }
        try:
            with self.engine.begin() as conn:
                # A re-created name continues after its deleted versions (no ABA on If-Match).
                retired = conn.execute(
                    select(retired_versions.c.version).where(retired_versions.c.name == name)
                ).scalar()
                row["version"] = (retired or 0) + 1
                conn.execute(table.insert().values(**row))
        except IntegrityError:
            raise Conflict(f"a definition named {name!r} exists already; use PUT to replace it") from None
        return StoredDefinition(**row)

    def seed(self, name: str, document: Mapping[str, Any], *, created_by: str | None = None) -> str:
        """Store a definition from a folder (``ctxmgmt serve`` loads the shipped ones) unless
        the name is stored, or was deleted: a deletion is remembered (``retired_versions``), so
        what a user deleted stays deleted; :meth:`create` brings it back. ``"created"``,
        ``"exists"`` or ``"deleted"``."""
        with self.engine.connect() as conn:
            if conn.execute(select(literal(1)).where(table.c.name == name)).first() is not None:
                return "exists"
            retired = select(literal(1)).where(retired_versions.c.name == name)
            if conn.execute(retired).first() is not None:
                return "deleted"
        try:
            self.create(name, document, created_by=created_by)
        except Conflict:  # another instance stored it first
            return "exists"
        return "created"

    def replace(
        self, name: str, document: Mapping[str, Any], *, if_version: int | None = None
    ) -> StoredDefinition:
        """Replace a whole definition. With ``if_version``, only if that is the stored version."""
        definition = self._validated(name, document)
        stamp = now_ms()
        values = {
            "description": definition.description,
            "hooks": definition.to_dict()["hooks"],
            "settings": dict(definition.settings) or None,
            "version": table.c.version + 1,
            # Never before the creation, whatever the clocks of several instances say.
            "last_modified": case((table.c.created_time > stamp, table.c.created_time), else_=stamp),
        }
        condition = table.c.name == name
        if if_version is not None:
            condition = condition & (table.c.version == if_version)
        for _ in range(3):  # an unconditional write retries when the name was re-created meanwhile
            with self.engine.begin() as conn:
                row = conn.execute(
                    table.update().where(condition).values(**values).returning(*table.c)
                ).first()
                current = None
                if row is None:
                    current = conn.execute(select(table.c.version).where(table.c.name == name)).scalar()
            if row is not None or current is None or if_version is not None:
                break
        if row is None:
            if current is None:
                raise self.missing(name)
            raise Conflict(
                f"definition {name!r} is at version {current}, not {if_version}; read it again and retry",
                current_version=current,
            )
        return StoredDefinition(**row._mapping)

    def delete(self, name: str, *, force: bool = False) -> None:
        """Delete a definition. Raises NotFound when there is none, and Conflict naming
        the agents that still use it, unless ``force``."""
        with self.engine.begin() as conn:
            if not force:
                users = conn.execute(
                    select(agents.c.agent_id, agents.c.name).where(agents.c.context_management_name == name)
                ).all()
                if users:
                    named = ", ".join(f"{u.name} ({u.agent_id})" for u in users[:10])
                    more = f" and {len(users) - 10} more" if len(users) > 10 else ""
                    raise Conflict(
                        f"definition {name!r} is used by agents {named}{more}; "
                        "delete them first or pass force=true"
                    )
            version = conn.execute(
                table.delete().where(table.c.name == name).returning(table.c.version)
            ).scalar()
            if version is not None:
                conn.execute(retired_versions.delete().where(retired_versions.c.name == name))
                conn.execute(retired_versions.insert().values(name=name, version=version))
        if version is None:
            raise self.missing(name)
        self.resolver.forget(name)

    # -- reads -----------------------------------------------------------------------
    def missing(self, name: str) -> NotFound:
        """The error for a name that is not stored, suggesting the closest stored names."""
        return NotFound(f"no definition named {name!r}{self.suggest(name)}")

    @_read
    def suggest(self, name: str) -> str:
        """``; did you mean 'a' or 'b'?`` naming the stored names closest to ``name``
        (among the first 5,000), or "" when none is close."""
        with self.engine.connect() as conn:
            names = conn.execute(select(table.c.name).order_by(table.c.name).limit(5000)).scalars().all()
        close = difflib.get_close_matches(name.lower()[:100], names, n=3, cutoff=0.6)
        if not close:
            return ""
        quoted = [repr(n) for n in close]
        listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        return f"; did you mean {listed}?"

    @_read
    def get(self, name: str) -> StoredDefinition:
        with self.engine.connect() as conn:
            row = conn.execute(select(table).where(table.c.name == name)).first()
        if row is None:
            raise self.missing(name)
        return StoredDefinition(**row._mapping)

    @_read
    def exists(self, name: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(literal(1)).where(table.c.name == name)).first() is not None

    @_read
    def list(
        self, *, offset: int = 0, limit: int = 10, q: str | None = None
    ) -> tuple[int, list[StoredDefinition]]:
        """(total matching, one page of definitions sorted by name in byte order)."""
        where = []
        if q:
            escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            where.append(table.c.name.like(f"%{escaped.lower()}%", escape="\\"))
        with self.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(table).where(*where)).scalar_one()
            rows = conn.execute(
                select(table).where(*where).order_by(self._byte_order).offset(offset).limit(limit)
            ).all()
        return total, [StoredDefinition(**r._mapping) for r in rows]

    @_read
    def resolve(self, name: str) -> Definition:
        """The built definition for a name: one small version query when cached, so an
        update or delete by any instance is seen on the next call."""
        return self.resolve_version(name)[0]

    def resolve_version(self, name: str) -> tuple[Definition, int]:
        """:meth:`resolve`, with the version it resolved (an execution record keeps it)."""
        with self.engine.connect() as conn:
            version = conn.exec_driver_sql(self._version_sql, (name,)).scalar()
        if version is None:
            self.resolver.forget(name)
            raise self.missing(name)

        def load() -> tuple[dict[str, Any], int]:
            stored = self.get(name)
            return stored.document(), stored.version

        definition, resolved = self.resolver.resolve(name, version, load)
        return definition, int(cast(int, resolved))
