"""Execution records are collected by their end time: index it (the start-time index served
no query).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25
"""

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_executions_started", "executions")
    op.create_index("ix_executions_ended", "executions", ["ended_time"])


def downgrade() -> None:
    op.drop_index("ix_executions_ended", "executions")
    op.create_index("ix_executions_started", "executions", ["started_time"])
