"""GPU health: the driver's events (Xid, ECC) and the marks they leave on a GPU until a reset or an
acknowledgement clears them

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07 14:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "gpu_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("bus_id", text(), nullable=True),
        sa.Column("source", text(), nullable=False),
        sa.Column("kind", text(), nullable=False),
        sa.Column("code", sa.Integer(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("message", text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_events_at", "gpu_events", ["at"])
    op.create_index("ix_gpu_events_gpu", "gpu_events", ["gpu"])
    op.create_table(
        "gpu_marks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("state", text(), nullable=False),
        sa.Column("reason", text(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("xid", sa.Integer(), nullable=True),
        sa.Column("cleared_at", sa.Float(), nullable=True),
        sa.Column("cleared_by_run", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_gpu_marks_gpu", "gpu_marks", ["gpu"])


def downgrade() -> None:
    op.drop_table("gpu_marks")
    op.drop_table("gpu_events")
