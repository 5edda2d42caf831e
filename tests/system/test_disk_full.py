"""The runs database's disk fills while a switch loads (#23): the switch goes on, the host and the units
agree throughout, what happened is held in memory and written by itself once the disk has room again."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from k25_sandbox import sandbox as sbx
from k25_sandbox.disk import fill, tmpfs
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.sandboxing import Api, inside


def _unit_active(info: sbx.SandboxInfo, unit: str) -> str:
    return inside(info, "systemctl", "is-active", unit).stdout.strip()


def test_a_disk_full_during_loading_loses_nothing(tmp_path: Path) -> None:
    models = tmp_path / "models"
    make_models(models)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    text = fake_engine_profile("slow", flavor="vllm", port=free_port(), models=models, load_seconds=6)
    (profiles / "slow.toml").write_text(text)
    with tmpfs(tmp_path / "state", "16m") as state:
        info = sbx.up(profiles=profiles, load_seconds=1, binds=(models, state),
                      settings={"state_dir": json.dumps(str(state))})  # fmt: skip
        try:
            api = Api(info)
            assert api.activate("baseline")["outcome"] == "active"
            r = api.client.post("/profiles/slow/activate")
            assert r.status_code == 202, r.text
            run_id = r.json()["run_id"]
            api.wait_until(lambda: api.status()["phase"] == "loading", what="loading")
            # Every write from here must grow the WAL (a checkpoint reset it): on a full disk, none fits.
            with sqlite3.connect(state / "k25.db") as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            print(f"filled the state directory with {fill(state / 'fill') / 2**20:.0f} MiB")
            st = api.wait_until(lambda: (s := api.status())["state"] != "switching" and s, within_s=60,
                                what="the switch ends")  # fmt: skip
            print(f"while full: {st['state']} {st['active_profile']}; warnings {st['warnings']}")
            # The host says what the units are: the new engine active and serving, the old one stopped.
            assert (st["state"], st["active_profile"]) == ("active", "slow"), st
            assert _unit_active(info, "k25-engine@slow.service") == "active"
            assert _unit_active(info, "vllm-kimi-k25-int4.service") == "inactive"
            held = [w for w in st["warnings"] if w.startswith("runs database cannot be written")]
            assert held, st["warnings"]
            assert "records held in memory" in held[0]
            # A new action waits until the records are written: a clear 503, nothing switched.
            refused = api.client.post("/profiles/baseline/activate")
            assert refused.status_code == 503, refused.text
            assert "cannot be written" in refused.json()["detail"]
            assert api.status()["active_profile"] == "slow"
            assert api.run(run_id)["outcome"] == "running"  # in the database: as it was when the disk filled

            (state / "fill").unlink()  # room again: the daemon writes what it held, by itself
            api.wait_until(lambda: not api.status()["warnings"], within_s=30, what="held records written")
            run = api.run(run_id)
            assert run["outcome"] == "active", run
            phases = [e["phase"] for e in run["events"]]
            assert phases[-1] == "active"
            assert "probing" in phases, phases  # the events while the disk was full were kept
            runs = api.client.get("/runs", params={"limit": 5}).json()
            serving = next(r for r in runs if r["kind"] == "serving" and r["parent_id"] == run_id)
            assert (serving["profile"], serving["outcome"]) == ("slow", "running")
            assert api.status()["serving_run_id"] == serving["id"]
            # And the host takes actions again.
            assert api.activate("baseline")["outcome"] == "active"
        finally:
            sbx.down(info)
            assert sbx.leftovers(info) == []


@pytest.fixture(autouse=True)
def _root() -> None:
    import os

    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: it needs root")
