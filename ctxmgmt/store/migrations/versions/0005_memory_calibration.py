"""Each memory keeps its calibration: per model, the ratio of the provider's reported input
tokens to ctxmgmt's count, so that a new process starts calibrated.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("memories", sa.Column("calibration", sa.JSON, nullable=True))


def downgrade() -> None:
    op.drop_column("memories", "calibration")
