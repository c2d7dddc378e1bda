"""The SQL tables. Schema changes go through Alembic migrations (migrations/)."""

from __future__ import annotations

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, MetaData, String, Table, Text

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

retired_versions = Table(
    "retired_versions",
    metadata,
    Column("name", String(49), primary_key=True),
    Column("version", Integer, nullable=False),
)
"""The last version of each deleted definition: a re-created one continues after it, so
that an If-Match from the deleted definition can never match the new one."""

agents = Table(
    "agents",
    metadata,
    Column("agent_id", String(36), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("body", JSON, nullable=False),
    Column("context_management_name", String(49), nullable=True, index=True),
    Column("created_time", BigInteger, nullable=False),
)

memories = Table(
    "memories",
    metadata,
    Column("memory_id", String(36), primary_key=True),
    Column("agent_id", String(36), nullable=False, index=True),
    Column("state", JSON, nullable=False),
    Column("length", Integer, nullable=False),
    Column("calibration", JSON, nullable=True),
    Column("created_time", BigInteger, nullable=False),
    Column("last_modified", BigInteger, nullable=False),
)

memory_messages = Table(
    "memory_messages",
    metadata,
    Column("memory_id", String(36), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("message", JSON, nullable=False),
)

offload = Table(
    "offload",
    metadata,
    Column("ref", String(40), primary_key=True),
    Column("session_key", String(40), nullable=False, index=True),
    Column("kind", String(20), nullable=False),
    Column("content", Text, nullable=False),
    Column("meta", JSON, nullable=True),
    Column("created_time", BigInteger, nullable=False),
)

executions = Table(
    "executions",
    metadata,
    Column("execution_id", String(32), primary_key=True),
    Column("agent_id", String(36), nullable=False),
    Column("memory_id", String(36), nullable=False),
    Column("definition", String(49), nullable=True),
    Column("definition_version", Integer, nullable=True),
    Column("definition_source", String(10), nullable=False),
    Column("started_time", BigInteger, nullable=False),
    Column("ended_time", BigInteger, nullable=False),
    Column("status", String(20), nullable=False),
    Column("llm_calls", Integer, nullable=False),
    Column("max_request_tokens", Integer, nullable=False),
    Column("context_window", Integer, nullable=True),
    Column("record", JSON, nullable=False),
    Index("ix_executions_agent", "agent_id", "started_time"),
    Index("ix_executions_ended", "ended_time"),
)
"""One row per agent execution; ``record`` holds the response, the error, the LLM calls
(usage and the managed request's tokens), the hook runs' trace entries and the archived
references."""

eval_reports = Table(
    "eval_reports",
    metadata,
    Column("report_id", String(32), primary_key=True),
    Column("created_time", BigInteger, nullable=False),
    Column("report", JSON, nullable=False),
    Index("ix_eval_reports_created", "created_time"),
)
"""One row per saved ``ctxmgmt eval`` report (the JSON report, schema ``ctxmgmt.eval/1``)."""

proxy_sessions = Table(
    "proxy_sessions",
    metadata,
    Column("session_key", String(64), primary_key=True),
    Column("updated_time", BigInteger, nullable=False),
    Column("state", JSON, nullable=False),
    Index("ix_proxy_sessions_updated", "updated_time"),
)
"""One row per conversation the proxy manages: its saved view, state and calibration, keyed
by a hash of the definition, the model and the conversation's start (or ``X-Ctxmgmt-Session``)."""
