"""Teardown in the sandbox with fake engines: the faults real engines show, and bystanders that survive."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import inside, probe, stop_engines


@pytest.fixture(autouse=True)
def _no_engine_running(sandbox: SandboxInfo) -> None:
    """These tests start units directly: whatever an earlier test left running is stopped first."""
    stop_engines(sandbox)


def test_teardown_in_the_sandbox(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "teardown")
    report = r["report"]
    assert report["ok"], report["error"]
    procs = {p["pid"]: p for p in report["processes"]}
    # The orphan that escaped its stopped unit: found by its mapping and title, killed.
    orphan = next(p for p in procs.values() if p["title"] == "sglang::scheduler_TP8")
    assert any(reason.startswith("maps ") for reason in orphan["reasons"])
    assert "engine process title 'sglang::scheduler_TP8'" in orphan["reasons"]
    assert orphan["outcome"] in ("exited after SIGTERM", "killed by SIGKILL")
    # The hand-started engine ignores SIGTERM: its GPU workers end by SIGKILL.
    workers = [
        p for p in procs.values() if p["title"] in ("VLLM::Worker_TP0", "VLLM::EngineCore") and p["foreign"]
    ]
    assert {p["title"] for p in workers} == {"VLLM::Worker_TP0", "VLLM::EngineCore"}
    for w in workers:
        assert w["signals"] == ["SIGTERM", "SIGKILL"]
        assert w["outcome"] == "killed by SIGKILL"
    assert r["stubborn_pid"] not in procs  # the API front end maps no GPU and has no engine title
    # Leaked engine shm files go; the bystander's PostgreSQL file, open by a live process, stays.
    leaked = [n for n in r["shm_before"] if n.startswith("psm_")]
    assert leaked
    assert report["shm_removed"]
    assert all(n.startswith("psm_") for n in report["shm_removed"])
    assert "PostgreSQL.1234" in r["shm_after"]
    assert not [n for n in r["shm_after"] if n.startswith("psm_")]
    assert r["bystander_alive"] is True
    # The simulated GPUs were held before and verify free after.
    assert max(r["gpus_before"]) > 1000
    assert report["verify"]["ok"] is True
    assert all(g["pids"] == [] for g in report["verify"]["gpus"])
    inside(sandbox, "rm", "-f", "/dev/shm/PostgreSQL.1234")


def test_teardown_dry_run_prints_the_plan_and_touches_nothing(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "start_ready", "k25-engine@leaky.service", "leaky")
    pids = {p["pid"] for p in r}
    out = inside(sandbox, str(Path(sys.executable).parent / "k25-ctl"), "teardown", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "victims" in out.stdout
    assert "VLLM::Worker_TP0" in out.stdout
    assert "SIGTERM" in out.stdout
    still = probe(sandbox, "engine_procs")
    assert {p["pid"] for p in still} == pids  # nothing was signalled
    inside(sandbox, "systemctl", "stop", "k25-engine@leaky.service")
