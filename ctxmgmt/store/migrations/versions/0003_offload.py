"""Offloaded content: tool results and removed messages, recallable by reference.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offload",
        sa.Column("ref", sa.String(40), primary_key=True),
        sa.Column("session_key", sa.String(40), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("meta", sa.JSON, nullable=True),
        sa.Column("created_time", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_offload_session_key", "offload", ["session_key"])


def downgrade() -> None:
    op.drop_table("offload")
