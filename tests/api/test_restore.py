"""Backup and restore through the daemon: a backup taken while the daemon runs (the scheduled one, SQLite's
online backup), more history written after it, the daemon stopped, `k25-ctl db restore`, a daemon started
over the restored file: it serves the same /runs and /benchmarks as before the backup (the run that was
running then ends as interrupted: the truth after a restore); a corrupted file or one of a newer schema
is refused with the reason and nothing is replaced."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from daemon.cli.main import main
from daemon.store import db
from tests.api.conftest import Env, running_env, wait_run

SPEC = {"concurrency": [1, 2], "num_prompts": 4, "max_tokens": 16, "warmups": 0}


async def _history(env: Env) -> tuple[list[Any], list[Any]]:
    runs = (await env.client.get("/runs", params={"limit": 500})).json()
    benches = (await env.client.get("/benchmarks", params={"limit": 500})).json()
    return runs, benches


async def _busy_hour(env: Env, profile: str) -> None:
    r = await env.client.post(f"/profiles/{profile}/activate", params={"wait": True}, headers=env.auth)
    assert r.status_code in (200, 202), r.text
    r = await env.client.post("/benchmarks", json=SPEC, headers=env.auth)
    assert r.status_code == 202, r.text
    assert (await wait_run(env, r.json()["run_id"]))["outcome"] == "ok"


async def test_a_restored_database_serves_the_same_runs_and_benchmarks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_env(tmp_path) as env:
        await _busy_hour(env, "baseline")
        await _busy_hour(env, "alpha")
        before = await _history(env)
        path = env.settings.database_path
        backup = db.backup(path, env.settings.backups_path)  # online, as the daily timer takes it
        await _busy_hour(env, "beta")  # after the backup: gone after the restore
        assert len((await _history(env))[1]) == len(before[1]) + 1
    config = tmp_path / "restore.toml"
    config.write_text(f'state_dir = "{env.settings.state_dir}"\nport = 9\n')  # nothing answers on 9
    monkeypatch.setenv("K25_CONFIG", str(config))
    assert main(["db", "restore", str(backup)]) == 0
    monkeypatch.setenv("K25_CONFIG", str(tmp_path / "absent.toml"))
    async with running_env(tmp_path) as env:
        runs, benches = await _history(env)
    assert benches == before[1]
    assert [(r["id"], r["kind"], r["profile"], r["started_at"]) for r in runs] == [
        (r["id"], r["kind"], r["profile"], r["started_at"]) for r in before[0]
    ]
    for now, then in zip(runs, before[0], strict=True):
        if then["outcome"] == "running":  # alpha's serving run, live at the backup: ended by the restart
            assert (now["kind"], now["outcome"]) == ("serving", "interrupted"), now
        else:
            assert now == then


@pytest.mark.parametrize("kind", ["corrupted", "newer"])
async def test_a_bad_backup_is_refused_and_the_daemon_serves_on_what_it_had(
    tmp_path: Path, kind: str
) -> None:
    async with running_env(tmp_path) as env:
        await _busy_hour(env, "baseline")
        before = await _history(env)
        path = env.settings.database_path
        bad = db.backup(path, tmp_path / "elsewhere")
    if kind == "corrupted":
        data = bytearray(bad.read_bytes())
        data[100:8192] = b"\xff" * (8192 - 100)
        bad.write_bytes(bytes(data))
    else:
        with sqlite3.connect(bad) as c:
            c.execute("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(db.RestoreRefused) as refused:
        db.restore(path, bad)
    assert ("9999" if kind == "newer" else "SQLite") in str(refused.value) or "integrity" in str(
        refused.value
    )
    assert not list(path.parent.glob("k25.db.replaced-*"))  # nothing was replaced
    async with running_env(tmp_path) as env:
        runs, benches = await _history(env)
    assert benches == before[1]
    assert [r["id"] for r in runs] == [r["id"] for r in before[0]]
