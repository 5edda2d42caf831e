"""The SQLite engine (WAL, foreign keys, busy timeout) and schema upgrades through Alembic."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, event
from sqlmodel import create_engine


def migrations_dir() -> Path:
    """The source tree's migrations/, or the copy an installed package carries under its prefix."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "migrations",
        Path(sys.prefix) / "share/k25-ctl/migrations",
    ):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("the Alembic migrations folder is missing from this installation")


def make_engine(path: Path) -> Engine:
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    return engine


def alembic_config(path: Path) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", f"sqlite:///{path}")
    return cfg


def upgrade(path: Path, revision: str = "head") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(path), revision)


def downgrade(path: Path, revision: str = "base") -> None:
    command.downgrade(alembic_config(path), revision)
