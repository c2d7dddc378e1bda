"""Agents, and conversation memory (one row per message, so appends do not rewrite).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(36), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("body", sa.JSON, nullable=False),
        sa.Column("context_management_name", sa.String(49), nullable=True),
        sa.Column("created_time", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_agents_context_management_name", "agents", ["context_management_name"])
    op.create_table(
        "memories",
        sa.Column("memory_id", sa.String(36), primary_key=True),
        sa.Column("agent_id", sa.String(36), nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("created_time", sa.BigInteger, nullable=False),
        sa.Column("last_modified", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_memories_agent_id", "memories", ["agent_id"])
    op.create_table(
        "memory_messages",
        sa.Column("memory_id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("message", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_messages")
    op.drop_table("memories")
    op.drop_table("agents")
