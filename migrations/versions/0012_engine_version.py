"""the engine as installed: each run's engine version, and known answers kept per engine version (an
upgrade records its own and reports how it differs from the old version's, instead of calling it corrupt)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_KEY = ["profile", "profile_sha256", "argv_sha256"]


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("engine_version", sa.String(), nullable=True))
    with op.batch_alter_table("known_answers") as batch:
        batch.add_column(sa.Column("engine_version", sa.String(), nullable=False, server_default=""))
        batch.drop_index("ix_known_answers_key")
        batch.create_index("ix_known_answers_key", [*OLD_KEY, "engine_version"], unique=True)


def downgrade() -> None:
    # One row per old key again: the newest answer of each (its other versions' rows are dropped).
    op.execute(
        "DELETE FROM known_answers WHERE id NOT IN (SELECT MAX(id) FROM known_answers "
        "GROUP BY profile, profile_sha256, argv_sha256)"
    )
    with op.batch_alter_table("known_answers") as batch:
        batch.drop_index("ix_known_answers_key")
        batch.create_index("ix_known_answers_key", OLD_KEY, unique=True)
        batch.drop_column("engine_version")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("engine_version")
