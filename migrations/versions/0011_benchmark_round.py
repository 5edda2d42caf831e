"""benchmarks: the experiment's round each was measured in, so that a verdict's interval is taken over
rounds (the requests of one round share its conditions) rather than over requests as if independent

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04 17:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.add_column(sa.Column("round", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("benchmarks") as batch:
        batch.drop_column("round")
