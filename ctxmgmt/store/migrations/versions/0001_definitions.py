"""Context-management definitions.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "context_management",
        sa.Column("name", sa.String(49), primary_key=True),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("hooks", sa.JSON, nullable=False),
        sa.Column("settings", sa.JSON, nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("created_time", sa.BigInteger, nullable=False),
        sa.Column("last_modified", sa.BigInteger, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("context_management")
