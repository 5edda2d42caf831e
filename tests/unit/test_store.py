"""The runs database: real SQLite files migrated by Alembic."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory

from daemon.core.errors import StoreError
from daemon.core.run_types import NewRun, Outcome, Phase, Progress, RunKind
from daemon.store.bench import BenchStore
from daemon.store.db import SCHEMA_HEAD, alembic_config, downgrade, stored_revision, upgrade
from daemon.store.queries import ExperimentLeft, Store


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
        NewRun(RunKind.SWITCH, "vllm-eagle3", from_profile="baseline", argv=["vllm", "serve"])
    )
    store.add_event(run_id=run_id, phase=Phase.LOADING, detail="37% (24/64)", progress=Progress(37, 24, 64))
    store.add_event(run_id=run_id, phase=Phase.PROBING, detail="HTTP up", load_seconds=12.5)
    store.save_teardown(run_id=run_id, ok=True, report={"ok": True})
    store.finish_run(run_id=run_id, outcome=Outcome.ACTIVE)
    view = store.get_run(run_id=run_id)
    assert view is not None
    assert view.run.outcome == "active"
    assert view.run.phase == "active"  # a finished run stays on its final phase
    assert (view.run.progress_percent, view.run.progress_done, view.run.progress_total) == (37, 24, 64)
    assert view.run.load_seconds == 12.5
    assert [e.phase for e in view.events] == ["loading", "probing", "active"]
    assert len(view.teardowns) == 1
    assert store.last_good_profile() == "vllm-eagle3"
    other = store.create_run(NewRun(RunKind.SWITCH, "sglang-eagle3"))
    assert store.mark_interrupted() == [other]
    assert store.get_run(run_id=other).run.outcome == "interrupted"  # type: ignore[union-attr]
    assert [r.id for r in store.list_runs(profile="vllm-eagle3")] == [run_id]
    assert [r.id for r in store.list_runs(limit=1)] == [other]


def test_metrics_summary_in_sql(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "k25.db")
    ids = {}
    for profile, load in (("a", 10.0), ("a", 20.0), ("b", 5.0)):
        ids[profile] = store.create_run(NewRun(RunKind.SWITCH, profile))
        store.add_event(run_id=ids[profile], phase=Phase.PROBING, load_seconds=load)
        store.finish_run(run_id=ids[profile], outcome=Outcome.ACTIVE)
    failed = store.create_run(NewRun(RunKind.SWITCH, "b"))
    store.add_event(run_id=failed, phase=Phase.PROBING, load_seconds=99.0)
    store.finish_run(run_id=failed, outcome=Outcome.FAILED)
    store.save_teardown(run_id=failed, ok=True, report={"steps": {"total_s": 0.25}})
    summary = store.metrics_summary()
    assert summary.counts == {("switch", "active"): 3, ("switch", "failed"): 1}
    assert summary.load_seconds == {"a": 20.0, "b": 5.0}  # each profile's newest good switch only
    assert set(summary.switch_seconds) == {"a", "b"}
    assert summary.teardown_seconds == 0.25


def test_database_errors_become_store_errors(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "k25.db")
    run_id = store.create_run(NewRun(RunKind.SWITCH, "a"))
    with sqlite3.connect(tmp_path / "k25.db") as c:
        c.execute("DROP TABLE run_events")
    with pytest.raises(StoreError, match="runs database failed"):
        store.add_event(run_id=run_id, phase=Phase.STOP)


def test_db_upgrade_command(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = dict(os.environ, K25_CONFIG="/nonexistent.toml", K25_STATE_DIR=str(tmp_path / "state"))
    r = subprocess.run([str(Path(sys.executable).parent / "k25-ctl"), "db", "upgrade"], env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert {"runs", "run_events", "teardowns"} <= _tables(tmp_path / "state/k25.db")


def test_the_summary_kept_current_equals_a_fresh_aggregate(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "k25.db")
    assert store.metrics_summary().counts == {}  # computed now, then maintained
    for profile, outcome in (("a", Outcome.ACTIVE), ("b", Outcome.FAILED), ("a", Outcome.ACTIVE)):
        run_id = store.create_run(NewRun(RunKind.SWITCH, profile))
        store.add_event(run_id=run_id, phase=Phase.PROBING, load_seconds=3.0)
        store.finish_run(run_id=run_id, outcome=outcome)
        store.save_teardown(run_id=run_id, ok=True, report={"steps": {"total_s": 0.5}})
    store.create_run(NewRun(RunKind.SERVING, "a"))
    kept = store.metrics_summary()
    store.forget_summary()
    fresh = store.metrics_summary()
    assert {k: v for k, v in kept.counts.items() if v} == fresh.counts
    assert (kept.load_seconds, kept.teardown_seconds) == (fresh.load_seconds, fresh.teardown_seconds)
    assert kept.switch_seconds.keys() == fresh.switch_seconds.keys()


def test_an_interrupted_experiment_says_what_it_was_to_restore(tmp_path: Path) -> None:
    """After a restart: of the runs just interrupted, the newest experiment (a sweep or not), its restore
    target (None: it was to stay) and a sweep's variants' units."""
    store = Store.open(tmp_path / "k25.db")
    bench = BenchStore(store)
    older, stays, plain, sweep = (
        store.create_run(NewRun(RunKind.EXPERIMENT, None, "baseline")) for _ in range(4)
    )
    variant = {"name": "sweepy~spec-tokens=1", "unit": "k25-engine@sweepy.v1.service"}
    bench.create_experiment(run_id=older, request={"vary": {"x": [1]}, "restore_to": "old", "variants": []})
    bench.create_experiment(run_id=stays, request={"vary": {}, "restore_to": None})
    bench.create_experiment(run_id=plain, request={"vary": {}, "restore_to": "baseline"})
    bench.create_experiment(run_id=sweep, request={"vary": {"spec-tokens": [1]}, "restore_to": "baseline",
                                                   "variants": [variant]})  # fmt: skip
    assert store.interrupted_experiment([plain, sweep, older]) == ExperimentLeft(
        sweep, "baseline", {"k25-engine@sweepy.v1.service": "sweepy~spec-tokens=1"}
    )
    assert store.interrupted_experiment([plain, older]) == ExperimentLeft(plain, "baseline", {})
    assert store.interrupted_experiment([stays]) == ExperimentLeft(stays, None, {})
    assert store.interrupted_experiment([]) is None


def test_the_schema_head_the_daemon_starts_on_is_alembics(tmp_path: Path) -> None:
    """A database at SCHEMA_HEAD is not handed to Alembic at a daemon's start: the constant must name the
    newest migration (a new migration moves it too)."""
    assert SCHEMA_HEAD == ScriptDirectory.from_config(alembic_config(tmp_path / "k25.db")).get_current_head()
    db = tmp_path / "k25.db"
    upgrade(db)
    assert stored_revision(db) == SCHEMA_HEAD
    downgrade(db, "0012")
    upgrade(db)  # one behind: migrated
    assert stored_revision(db) == SCHEMA_HEAD
