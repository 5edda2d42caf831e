"""run_events: each progress step's figures, so that a follower that joins late replays the same bars

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
COLUMNS = ("progress_percent", "progress_done", "progress_total")


def upgrade() -> None:
    with op.batch_alter_table("run_events") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run_events") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
