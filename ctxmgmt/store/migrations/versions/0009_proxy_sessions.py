"""Proxy sessions: the managed state of each conversation the proxy sees.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "proxy_sessions",
        sa.Column("session_key", sa.String(64), primary_key=True),
        sa.Column("updated_time", sa.BigInteger, nullable=False),
        sa.Column("state", sa.JSON, nullable=False),
    )
    op.create_index("ix_proxy_sessions_updated", "proxy_sessions", ["updated_time"])


def downgrade() -> None:
    op.drop_index("ix_proxy_sessions_updated", "proxy_sessions")
    op.drop_table("proxy_sessions")
