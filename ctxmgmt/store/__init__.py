"""SQL storage of definitions: SQLite by default, PostgreSQL through psycopg."""

from ..errors import Conflict, NotFound
from .repository import DEFAULT_DATABASE_URL, DefinitionStore, StoredDefinition, connect, migrate

__all__ = [
    "DEFAULT_DATABASE_URL",
    "Conflict",
    "DefinitionStore",
    "NotFound",
    "StoredDefinition",
    "connect",
    "migrate",
]
