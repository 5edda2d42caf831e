"""The host layer against a real systemd, D-Bus and journald (the sandbox) with fake engines."""

from __future__ import annotations

import pytest

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import inside, probe, stop_engines


@pytest.fixture(autouse=True)
def _no_engine_running(sandbox: SandboxInfo) -> None:
    """These tests start units directly: whatever an earlier test left running is stopped first."""
    stop_engines(sandbox)


def test_start_and_stop_return_job_results(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "jobs", "k25-engine@leaky.service")
    assert r["start"]["job_result"] == "done"
    assert r["start"]["state"]["active_state"] == "active"
    assert r["start"]["state"]["main_pid"] > 0
    # A start of a running unit is a no-op job (systemd's answer), never a second engine.
    assert r["start_again"]["job_result"] == "done"
    assert r["start_again"]["state"]["main_pid"] == r["start"]["state"]["main_pid"]
    assert r["stop"]["job_result"] == "done"
    assert r["stop"]["state"]["active_state"] == "inactive"
    assert r["stop"]["escalated"] is False
    assert r["unknown"]["type"] == "UnitNotFound"
    assert "no-such-unit.service" in r["unknown"]["message"]


def test_stop_of_sigterm_ignoring_engine_ends_by_sigkill(sandbox: SandboxInfo) -> None:
    stop = probe(sandbox, "stop_ready", "k25-engine@stubborn.service", "stubborn")
    assert stop["job_result"] == "done"
    assert stop["escalated"] is True  # systemd had to SIGKILL after TimeoutStopSec
    assert stop["state"]["result"] == "timeout"
    assert stop["state"]["active_state"] == "failed"
    print(f"stop took {stop['s']:.1f}s (TimeoutStopSec, then SIGKILL)")
    inside(sandbox, "systemctl", "reset-failed", "k25-engine@stubborn.service")


def test_crash_while_loading_is_reported_by_the_state_stream(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "crash", "k25-engine@crashy.service")
    assert r["states"][-1] == ["failed", "failed"]
    assert r["result"] == "exit-code"
    assert r["status"] == 1
    print(f"state stream latency after the engine's exit: {r['latency_s'] * 1000:.1f} ms")


def test_journal_follow_yields_progress_in_order_and_errors(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "journal", "k25-engine@crashy.service", "crashy")
    percents = [p[0] for p in r["progress"]]
    assert percents == sorted(percents)
    assert len(set(percents)) >= 3
    assert r["progress"][0][2] == 8  # n/N with N = the shard count
    lines = [e["line"] for e in r["errors"]]
    assert any("CUDA out of memory" in line for line in lines)
    assert any("Traceback" in line for line in lines)
    assert {e["unit"] for e in r["errors"]} == {"k25-engine@crashy.service"}
    assert r["tail"]  # the last lines can be read back


def test_views_see_the_engine_and_the_gpu_memory_follows_it(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "views", "vllm-kimi-k25-int4.service", "baseline")
    titles = {p["title"] for p in r["engine_procs"]}
    assert {"VLLM::EngineCore", "VLLM::Worker_TP0", "VLLM::Worker_TP7"} <= titles
    worker = next(p for p in r["engine_procs"] if p["title"] == "VLLM::Worker_TP3")
    assert worker["mapped"] == [f"{sandbox.dir}/dev/nvidia3"]
    assert worker["cgroup"].endswith("/system.slice/vllm-kimi-k25-int4.service")
    assert worker["pid"] in r["cgroup_pids"]
    assert r["main_pid"] in r["cgroup_pids"]
    core = next(p for p in r["engine_procs"] if p["title"] == "VLLM::EngineCore")
    held = [e for e in r["shm"] if e["name"].startswith("psm_") and core["pid"] in e["users"]]
    assert len(held) == 1  # the engine's own segment, open and mapped by EngineCore
    assert held[0]["is_file"] is True
    during = r["gpus_during"]
    assert all(g["memory_used_mib"] > b for g, b in zip(during, r["gpus_before"], strict=True))
    assert worker["pid"] in [p["pid"] for p in during[3]["processes"]]
    assert r["gpus_after"] == r["gpus_before"]  # memory back once the holders died


def test_fake_engine_metrics_parse_into_the_configured_acceptance(sandbox: SandboxInfo) -> None:
    r = probe(sandbox, "metrics", "k25-engine@vllm-eagle3.service", "vllm-eagle3")
    assert abs(r["acceptance_rate"] - 0.15) < 0.02
    assert abs(r["acceptance_length"] - (1 + 3 * 0.15)) < 0.06
    assert r["generation_tokens"] >= 400
    r = probe(sandbox, "metrics", "k25-engine@sglang-eagle3.service", "sglang-eagle3")
    assert abs(r["acceptance_length"] - (1 + 3 * 0.6)) < 0.1
    assert abs(r["acceptance_rate"] - (1 + 3 * 0.6) / 4) < 0.03
