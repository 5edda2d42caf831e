"""The runs database: real SQLite files migrated by Alembic."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from alembic import command

from daemon.store.db import alembic_config, downgrade, upgrade
from daemon.store.queries import Store


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as c:
        return {r[0] for r in c.execute("select name from sqlite_master where type='table'")}


def test_upgrade_from_empty_downgrade_and_up_again(tmp_path: Path) -> None:
    db = tmp_path / "k25.db"
    upgrade(db)
    assert {"runs", "run_events", "teardowns", "alembic_version"} <= _tables(db)
    downgrade(db, "base")
    assert _tables(db) <= {"alembic_version"}
    upgrade(db)
    assert {"runs", "run_events", "teardowns"} <= _tables(db)


def test_models_match_migrations(tmp_path: Path) -> None:
    db = tmp_path / "k25.db"
    upgrade(db)
    command.check(alembic_config(db))  # raises if autogenerate would find a difference


def test_wal_and_run_lifecycle(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "k25.db")
    with sqlite3.connect(tmp_path / "k25.db") as c:
        assert c.execute("pragma journal_mode").fetchone()[0] == "wal"
    run_id = store.create_run(
        kind="switch", profile="vllm-eagle3", from_profile="baseline", argv=["vllm", "serve"]
    )
    store.add_event(run_id=run_id, phase="loading", detail="37% (24/64)", progress_percent=37)
    store.save_teardown(run_id=run_id, ok=True, report={"ok": True})
    store.finish_run(run_id=run_id, outcome="active", load_seconds=12.5)
    view = store.get_run(run_id=run_id)
    assert view is not None
    assert view.run.outcome == "active"
    assert view.run.progress_percent == 37
    assert [e.phase for e in view.events] == ["loading", "active"]
    assert len(view.teardowns) == 1
    assert store.last_good_profile() == "vllm-eagle3"
    other = store.create_run(kind="switch", profile="sglang-eagle3")
    assert store.mark_interrupted() == [other]
    assert store.get_run(run_id=other).run.outcome == "interrupted"  # type: ignore[union-attr]
    assert [r.id for r in store.list_runs(profile="vllm-eagle3")] == [run_id]
    assert [r.id for r in store.list_runs(limit=1)] == [other]


def test_db_upgrade_command(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, K25_CONFIG="/nonexistent.toml", K25_STATE_DIR=str(tmp_path / "state"))
    r = subprocess.run([str(Path(sys.executable).parent / "k25-ctl"), "db", "upgrade"], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert {"runs", "run_events", "teardowns"} <= _tables(tmp_path / "state/k25.db")
