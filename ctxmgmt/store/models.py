"""The SQL tables. Schema changes go through Alembic migrations (migrations/)."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Integer, MetaData, String, Table, Text

metadata = MetaData()

definitions = Table(
    "context_management",
    metadata,
    Column("name", String(49), primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("hooks", JSON, nullable=False),
    Column("settings", JSON, nullable=True),
    Column("version", Integer, nullable=False),
    Column("created_time", BigInteger, nullable=False),
    Column("last_modified", BigInteger, nullable=False),
    Column("created_by", String(200), nullable=True),
)
