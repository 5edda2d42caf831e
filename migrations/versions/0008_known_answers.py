"""known_answers: each profile's greedy answer after a cold start, the proof every wake must give again

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "known_answers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("profile", text(), nullable=False),
        sa.Column("profile_sha256", text(), nullable=False),
        sa.Column("argv_sha256", text(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.Column("answers", text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_known_answers_key", "known_answers", ["profile", "profile_sha256", "argv_sha256"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ix_known_answers_key", table_name="known_answers")
    op.drop_table("known_answers")
