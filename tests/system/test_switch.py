"""The switch transaction through the daemon in the sandbox: real systemd units, fake engines."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside


def _phases(run: dict[str, Any]) -> list[str]:
    return [e["phase"] for e in run["events"]]


def _percents(run: dict[str, Any]) -> set[str]:
    return {
        e["detail"].split("%")[0] for e in run["events"] if e["phase"] == "loading" and "%" in e["detail"]
    }


def _active_units(sandbox: SandboxInfo) -> list[str]:
    out = inside(
        sandbox, "systemctl", "list-units", "--state=active,activating", "--no-legend", "--plain", "*.service"
    )
    return [
        line.split()[0] for line in out.stdout.splitlines() if "k25-engine@" in line or "vllm-kimi" in line
    ]


def test_switch_cycle_through_the_three_profiles(api: Api, sandbox: SandboxInfo) -> None:
    for name in ("baseline", "vllm-eagle3", "sglang-eagle3", "baseline"):
        run = api.activate(name, force=True)
        assert run["outcome"] == "active", run["error"]
        phases = _phases(run)
        for phase in ("stop", "teardown", "start", "loading", "probing", "active"):
            assert phase in phases, (name, phases)
        assert len(_percents(run)) >= 3
        assert run["load_seconds"] > 0
        assert run["argv"][:3][1:] == ["-m", "k25_sandbox.fake_engine"]
        assert len(run["profile_sha256"]) == 64
        assert run["teardowns"][0]["ok"] is True
        status = api.status()
        assert (status["state"], status["active_profile"]) == ("active", name)
        assert len(_active_units(sandbox)) == 1


def test_busy_and_noop(api: Api) -> None:
    api.activate("baseline")
    again = api.client.post("/profiles/baseline/activate")
    assert again.status_code == 200
    assert again.json()["run_id"] is None
    started = api.activate("vllm-eagle3", wait=False)
    busy = api.client.post("/profiles/sglang-eagle3/activate")
    assert busy.status_code == 409
    assert f"run {started['run_id']}" in busy.json()["detail"]
    assert api.wait_run(started["run_id"])["outcome"] == "active"


def test_crash_while_loading_rolls_back(api: Api) -> None:
    api.activate("baseline")
    run = api.activate("crashy", expect="failed")
    assert "CUDA out of memory" in run["error"]
    assert "exited during loading" in run["error"]
    assert "rollback" in _phases(run)
    rollbacks = [
        r for r in api.client.get("/runs", params={"limit": 5}).json() if r["parent_id"] == run["id"]
    ]
    assert len(rollbacks) == 1
    rb = api.run(rollbacks[0]["id"])
    assert (rb["kind"], rb["profile"], rb["outcome"]) == ("rollback", "baseline", "active")
    assert api.status()["active_profile"] == "baseline"
    assert api.status()["state"] == "active"


def test_deadlock_after_ready_is_not_ready(api: Api) -> None:
    api.activate("baseline")
    run = api.activate("deadlocked", expect="failed")
    assert "probe_timeout_s=3" in run["error"]
    assert "probing" in _phases(run)
    assert api.status()["active_profile"] == "baseline"


def test_cancel_during_loading_restores_the_previous(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    run_id = api.activate("slow", wait=False)["run_id"]
    api.wait_until(lambda: len(_percents(api.run(run_id))) >= 2, what="loading progress")
    r = api.client.post(f"/runs/{run_id}/cancel")
    assert r.status_code == 202
    run = api.wait_run(run_id)
    assert run["outcome"] == "cancelled"
    api.wait_until(lambda: api.status()["state"] == "active", what="rollback")
    assert api.status()["active_profile"] == "baseline"
    assert _active_units(sandbox) == ["vllm-kimi-k25-int4.service"]


def test_rollback_target_broken_means_degraded(api: Api, sandbox: SandboxInfo) -> None:
    fragile = Path(sandbox.dir) / "etc/profiles.d/fragile.toml"
    good = fragile.read_text()
    try:
        assert api.activate("fragile")["outcome"] == "active"
        fragile.write_text(good.replace('"--rate"', '"--fault", "crash-loading", "--rate"'))
        before = {r["id"] for r in api.client.get("/runs", params={"limit": 100}).json()}
        api.activate("crashy", expect="failed")
        status = api.status()
        assert status["state"] == "degraded"
        assert "rollback to fragile failed" in status["reason"]
        assert status["active_profile"] is None
        assert _active_units(sandbox) == []
        new = [r for r in api.client.get("/runs", params={"limit": 100}).json() if r["id"] not in before]
        assert sorted((r["kind"], r["outcome"]) for r in new) == [
            ("rollback", "failed"),
            ("switch", "failed"),
        ]
    finally:
        fragile.write_text(good)
    assert api.activate("baseline")["outcome"] == "active"  # degraded is left by a switch that works


def test_daemon_killed_mid_switch_is_reconciled(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    run_id = api.activate("slow", wait=False)["run_id"]
    api.wait_until(lambda: len(_percents(api.run(run_id))) >= 1, what="loading progress")
    old_pid = inside(
        sandbox, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service"
    ).stdout.strip()
    assert inside(sandbox, "systemctl", "kill", "-s", "KILL", "k25-ctl.service").returncode == 0
    # systemd restarts the daemon (Restart=on-failure); the engine unit, not its child, keeps going.
    api.wait_until(
        lambda: (
            inside(sandbox, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
            not in ("0", old_pid)
            and api.client.get("/healthz").status_code == 200
        ),
        within_s=60,
        what="daemon restarted",
    )
    run = api.run(run_id)
    assert run["outcome"] == "interrupted"
    # The engine was still loading: the restarted daemon does not call it active before it proved ready.
    resumed = api.wait_until(
        lambda: next((r for r in api.client.get("/runs").json() if r["parent_id"] == run_id), None),
        what="the resuming run",
    )
    assert api.status()["state"] in ("switching", "active")
    resumed = api.wait_run(resumed["id"])
    assert (resumed["kind"], resumed["profile"], resumed["outcome"]) == ("switch", "slow", "active")
    phases = _phases(resumed)
    assert "start" not in phases  # followed, not started again
    assert {"loading", "probing", "active"} <= set(phases)
    status = api.status()
    assert _active_units(sandbox) == ["k25-engine@slow.service"]
    assert (status["state"], status["active_profile"]) == ("active", "slow")
    db = Path(sandbox.dir) / "state/k25.db"
    with sqlite3.connect(db) as c:
        assert c.execute("pragma integrity_check").fetchone()[0] == "ok"
        assert c.execute("select count(*) from runs where id = ?", (run_id,)).fetchone()[0] == 1
    assert api.activate("baseline", force=True)["outcome"] == "active"


def test_the_hardened_daemon_sees_gpu_holders_by_their_mappings(api: Api) -> None:
    """k25-ctl.service bounds the daemon's capabilities; reading an engine's /proc/PID/maps then needs
    CAP_SYS_PTRACE. Without it the plan would still find engines by title, but no GPU context or mapping."""
    api.activate("baseline")  # a switch, or 200 when baseline already serves
    st = api.wait_until(lambda: (s := api.status())["active_profile"] == "baseline" and s, what="baseline")
    assert st["warnings"] == []
    plan = api.client.get("/teardown/plan").json()
    workers = [v for v in plan["victims"] if v["title"].startswith("VLLM::Worker_TP")]
    assert len(workers) == 8, plan["victims"]
    for w in workers:
        assert any(r.startswith("maps ") for r in w["reasons"]), w
        assert any(r.startswith("GPU context on GPU ") for r in w["reasons"]), w
