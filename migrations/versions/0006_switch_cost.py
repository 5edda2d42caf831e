"""runs: what a switch cost the clients (out of rotation and back, the drain, requests cut)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 19:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = (
    ("ready_down_at", sa.DateTime()),
    ("ready_up_at", sa.DateTime()),
    ("downtime_s", sa.Float()),
    ("drain_s", sa.Float()),
    ("drain_finished", sa.Integer()),
    ("drain_cut", sa.Integer()),
    ("drain_timed_out", sa.Boolean()),
)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for name, _ in reversed(COLUMNS):
            batch_op.drop_column(name)
