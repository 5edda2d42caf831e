"""parked: engines asleep on purpose (parking), readopted after a daemon restart

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 22:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "parked",
        sa.Column("profile", text(), nullable=False),
        sa.Column("unit", text(), nullable=False),
        sa.Column("main_pid", sa.Integer(), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("gpu_mib", text(), nullable=False),
        sa.Column("host_ram_bytes", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("profile_sha256", text(), nullable=False),
        sa.PrimaryKeyConstraint("profile"),
    )


def downgrade() -> None:
    op.drop_table("parked")
