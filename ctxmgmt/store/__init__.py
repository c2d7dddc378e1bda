"""SQL storage of definitions: SQLite by default, PostgreSQL through psycopg."""

from ..errors import Conflict, NotFound
from .agents import AgentStore, MemoryStore
from .evals import EvalStore
from .executions import ExecutionStore
from .repository import DEFAULT_DATABASE_URL, DefinitionStore, StoredDefinition, connect, migrate

__all__ = [
    "DEFAULT_DATABASE_URL",
    "AgentStore",
    "Conflict",
    "DefinitionStore",
    "EvalStore",
    "ExecutionStore",
    "MemoryStore",
    "NotFound",
    "StoredDefinition",
    "connect",
    "migrate",
]
