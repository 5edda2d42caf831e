"""The SQLite engine (WAL, foreign keys, busy timeout) and schema upgrades through Alembic."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlmodel import create_engine

if TYPE_CHECKING:
    from alembic.config import Config

WAL_LIMIT_BYTES = 16 * 1024**2


def migrations_dir() -> Path:
    """The source tree's migrations/, or the copy an installed package carries under its prefix."""
    for candidate in (
        Path(__file__).resolve().parents[2] / "migrations",
        Path(sys.prefix) / "share/k25-ctl/migrations",
    ):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("the Alembic migrations folder is missing from this installation")


def private_folder(folder: Path) -> None:
    """A folder of the database's files (the state directory, the backups): 0700."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)


def private(path: Path) -> None:
    """The state directory 0700 and the database 0600 (its WAL and SHM files follow the database's mode):
    runs hold command lines and journal excerpts."""
    private_folder(path.parent)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    path.chmod(0o600)


def healthy(path: Path) -> str | None:
    """None when the file is a sound SQLite database (or absent); else what is wrong with it."""
    if not path.exists():
        return None
    if path.stat().st_size == 0:
        return "the database file is empty (0 bytes)"
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
            result = c.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as e:
        return f"not a usable SQLite database: {e}"
    return None if result == "ok" else f"integrity check failed: {result}"


def move_aside(path: Path, why: str) -> Path:
    """Keep a broken database (and its WAL/SHM) for inspection; a fresh one takes its place."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.broken-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        src = path.with_name(path.name + suffix)
        if src.exists():
            src.rename(target.with_name(target.name + suffix))
    (target.with_name(target.name + ".why")).write_text(why + "\n")
    return target


def make_engine(path: Path) -> Engine:
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        # The WAL is cut back to this after a checkpoint: a flood of captured requests (written, then
        # dropped by the caps) must not leave a WAL of its peak size behind.
        cur.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        cur.close()

    return engine


# The newest migration's revision (tests/unit/test_store.py holds it to Alembic's head): a database
# already there is not handed to Alembic, whose import (its dialects with it) costs 0.4 s of CPU at every
# daemon start.
SCHEMA_HEAD = "0013"


def alembic_config(path: Path) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", f"sqlite:///{path}")
    return cfg


def upgrade(path: Path, revision: str = "head") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if revision == "head" and stored_revision(path) == SCHEMA_HEAD:
        return
    from alembic import command

    command.upgrade(alembic_config(path), revision)


def downgrade(path: Path, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(alembic_config(path), revision)


def stored_revision(path: Path) -> str | None:
    """The database's revision; None where there is no file or it was never migrated."""
    if not path.exists():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as c:
            row = c.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.Error:  # no alembic_version table (never migrated), or not a database: Alembic says
        return None
    return str(row[0]) if row else None


def revisions(path: Path) -> tuple[str | None, str]:
    """(the database's revision, None where it has none yet; the newest revision this code knows)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config(path)).get_current_head()
    if head is None:
        raise FileNotFoundError("the Alembic migrations folder has no revision")
    return stored_revision(path), head


BACKUP_INFIX = ".backup-"


def backup(path: Path, into: Path | None = None) -> Path:
    """A consistent copy of the database (SQLite's online backup: safe while the daemon writes), beside it
    or in the folder `into`, named for its revision and the time: what an upgrade keeps before it
    migrates, and what the daily timer keeps (`prune_backups`)."""
    current, _ = revisions(path)
    # milliseconds, from one reading of the clock: two backups in a second stay two
    stamp = datetime.now().strftime("%Y%m%dT%H%M%S.%f")[:-3]
    name = f"{path.name}{BACKUP_INFIX}{current or 'none'}-{stamp}"
    if into is not None:
        private_folder(into)
    target = (into or path.parent) / name
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as src:
        with contextlib.closing(sqlite3.connect(target)) as dst:
            src.backup(dst)
    target.chmod(0o600)
    return target


def prune_backups(folder: Path, name: str, keep: int) -> list[Path]:
    """The oldest backups of database `name` in `folder` beyond the newest `keep` removed; which went."""
    found = sorted(folder.glob(f"{name}{BACKUP_INFIX}*"), key=lambda p: p.stat().st_mtime, reverse=True)
    gone = found[keep:]
    for old in gone:
        old.unlink()
    return gone


class RestoreRefused(Exception):
    """The file cannot replace the database (nothing was replaced): the reason, for the operator."""


def restore(path: Path, source: Path) -> tuple[Path | None, str | None]:
    """Replace the database at `path` by the SQLite file `source`, after checking it: sound (integrity),
    a k25-ctl database, and a schema this code knows (a newer one is refused: upgrade k25-ctl first).
    The database it replaces is kept beside it; an older schema is migrated to the head. Returns (the
    kept database or None where there was none, the revision it was migrated from or None). The daemon
    must not run meanwhile (the CLI checks)."""
    if not source.is_file():
        raise RestoreRefused(f"{source}: no such file")
    if why := healthy(source):
        raise RestoreRefused(f"{source}: {why}")
    try:
        theirs, head = revisions(source)
    except sqlite3.DatabaseError as e:
        raise RestoreRefused(f"{source}: not readable: {e}") from e
    if theirs is None:
        raise RestoreRefused(f"{source}: not a k25-ctl database (no schema revision)")
    known = _known_revisions(path)
    if theirs not in known:
        raise RestoreRefused(
            f"{source}: schema {theirs} is not one this k25-ctl knows (head {head}): a newer k25-ctl "
            "wrote it; upgrade k25-ctl first, then restore"
        )
    kept = None
    if path.exists():
        kept = path.with_name(f"{path.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            old = path.with_name(path.name + suffix)
            if old.exists():
                old.rename(kept.with_name(kept.name + suffix))
    private(path)
    with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
        with contextlib.closing(sqlite3.connect(path)) as dst:
            src.backup(dst)
    path.chmod(0o600)
    if theirs != head:
        upgrade(path)
    return kept, (theirs if theirs != head else None)


def _known_revisions(path: Path) -> set[str]:
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(alembic_config(path)).walk_revisions()}
