"""Eval reports: what ``ctxmgmt eval --save`` measured, for the web page to show.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "eval_reports",
        sa.Column("report_id", sa.String(32), primary_key=True),
        sa.Column("created_time", sa.BigInteger, nullable=False),
        sa.Column("report", sa.JSON, nullable=False),
    )
    op.create_index("ix_eval_reports_created", "eval_reports", ["created_time"])


def downgrade() -> None:
    op.drop_index("ix_eval_reports_created", "eval_reports")
    op.drop_table("eval_reports")
