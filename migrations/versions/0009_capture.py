"""captured, datasets, dataset_prompts: mirrored production requests and named prompt sets to replay

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString
    op.create_table(
        "captured",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("endpoint", text(), nullable=False),
        sa.Column("model", text(), nullable=True),
        sa.Column("category", text(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("body", text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(op.f("ix_captured_at"), "captured", ["at"], unique=False)
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", text(), nullable=False),
        sa.Column("source", text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("prompts", sa.Integer(), nullable=False),
        sa.Column("categories", text(), nullable=False),
        sa.Column("sha256", text(), nullable=False),
        sa.Column("lengths", text(), nullable=False),
        sa.Column("output_mean", sa.Float(), nullable=True),
        sa.Column("window_start", sa.Float(), nullable=True),
        sa.Column("window_end", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "dataset_prompts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("offset_s", sa.Float(), nullable=True),
        sa.Column("endpoint", text(), nullable=False),
        sa.Column("category", text(), nullable=True),
        sa.Column("body", text(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dataset_prompts_order", "dataset_prompts", ["dataset_id", "idx"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_dataset_prompts_order", table_name="dataset_prompts")
    op.drop_table("dataset_prompts")
    op.drop_table("datasets")
    op.drop_index(op.f("ix_captured_at"), table_name="captured")
    op.drop_table("captured")
