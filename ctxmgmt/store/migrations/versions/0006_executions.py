"""One record per agent execution: what the model saw at each call and what each manager did.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "executions",
        sa.Column("execution_id", sa.String(32), primary_key=True),
        sa.Column("agent_id", sa.String(36), nullable=False),
        sa.Column("memory_id", sa.String(36), nullable=False),
        sa.Column("definition", sa.String(49), nullable=True),
        sa.Column("definition_version", sa.Integer, nullable=True),
        sa.Column("definition_source", sa.String(10), nullable=False),
        sa.Column("started_time", sa.BigInteger, nullable=False),
        sa.Column("ended_time", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("llm_calls", sa.Integer, nullable=False),
        sa.Column("max_request_tokens", sa.Integer, nullable=False),
        sa.Column("context_window", sa.Integer, nullable=True),
        sa.Column("record", sa.JSON, nullable=False),
    )
    op.create_index("ix_executions_agent", "executions", ["agent_id", "started_time"])
    op.create_index("ix_executions_started", "executions", ["started_time"])


def downgrade() -> None:
    op.drop_index("ix_executions_started", "executions")
    op.drop_index("ix_executions_agent", "executions")
    op.drop_table("executions")
