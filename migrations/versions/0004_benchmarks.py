"""benchmarks, their levels, experiments

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    text = sqlmodel.sql.sqltypes.AutoString()
    op.create_table(
        "benchmarks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("profile", text, nullable=False),
        sa.Column("serving_run_id", sa.Integer(), nullable=True),
        sa.Column("experiment_run_id", sa.Integer(), nullable=True),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("spec", text, nullable=False),
        sa.Column("spec_hash", text, nullable=False),
        sa.Column("prompt_hash", text, nullable=False),
        sa.Column("provenance", text, nullable=False),
        sa.Column("gpu_key", text, nullable=False),
        sa.Column("output_throughput", sa.Float(), nullable=True),
        sa.Column("acceptance_length", sa.Float(), nullable=True),
        sa.Column("acceptance_rate", sa.Float(), nullable=True),
        sa.Column("other_traffic", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.create_index("ix_benchmarks_profile", ["profile"], unique=False)
        batch_op.create_index("ix_benchmarks_spec_hash", ["spec_hash"], unique=False)
        batch_op.create_index("ix_benchmarks_experiment_run_id", ["experiment_run_id"], unique=False)
    op.create_table(
        "benchmark_levels",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("benchmark_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=True),
        sa.Column("request_rate", sa.Float(), nullable=True),
        sa.Column("summary", text, nullable=False),
        sa.Column("requests", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["benchmark_id"], ["benchmarks.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("benchmark_levels", schema=None) as batch_op:
        batch_op.create_index("ix_benchmark_levels_benchmark_id", ["benchmark_id"], unique=False)
    op.create_table(
        "experiments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("request", text, nullable=False),
        sa.Column("steps", text, nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id"),
    )


def downgrade() -> None:
    op.drop_table("experiments")
    with op.batch_alter_table("benchmark_levels", schema=None) as batch_op:
        batch_op.drop_index("ix_benchmark_levels_benchmark_id")
    op.drop_table("benchmark_levels")
    with op.batch_alter_table("benchmarks", schema=None) as batch_op:
        batch_op.drop_index("ix_benchmarks_experiment_run_id")
        batch_op.drop_index("ix_benchmarks_spec_hash")
        batch_op.drop_index("ix_benchmarks_profile")
    op.drop_table("benchmarks")
