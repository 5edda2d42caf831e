"""Teardown against a real GPU: a CUDA holder found through NVML and its device mappings, killed, and NVML
verifying the memory back; this test process, which holds NVML open, is never a victim."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from daemon.host.gpu import NvmlGpus
from daemon.host.procs import ProcfsProcesses
from daemon.host.shm import DevShm
from daemon.host.signals import PidfdControl
from daemon.teardown.execute import Teardown, verify
from daemon.teardown.plan import TeardownPolicy
from tests.gpu.conftest import Holders

POLICY = TeardownPolicy(
    "/dev/nvidia*", ("VLLM::*", "sglang::*"), ("psm_*",), ("nvidia-persistenced", "nvidia-smi")
)


def _teardown(nvml: NvmlGpus, shm_dir: Path) -> Teardown:
    return Teardown(ProcfsProcesses(), nvml, DevShm(shm_dir), PidfdControl(), POLICY, term_grace_s=10,
                    kill_grace_s=10, verify_timeout_s=30, verify_samples=3, slack_mib=1024)  # fmt: skip


def _safe_plan(teardown: Teardown, gpus: tuple[int, ...], expected: set[int]) -> None:
    """Refuse to execute anything but our own holders (the device machine is not ours to clean)."""
    plan = asyncio.run(teardown.plan(gpus))
    victims = {v.pid: v.reasons for v in plan.victims}
    print("plan victims:", victims)
    print("plan spared:", [(s.pid, s.reason) for s in plan.spared])
    if set(victims) != expected:
        pytest.fail(f"the plan's victims {sorted(victims)} are not exactly our holders {sorted(expected)}")
    assert os.getpid() not in victims


def test_real_cuda_holder_found_killed_and_verified(nvml: NvmlGpus, holders: Holders, tmp_path: Path) -> None:
    idle = nvml.gpus()[0].memory_used_mib
    holder = holders(0, 8)
    held = nvml.gpus()[0]
    print(
        f"GPU 0 {held.name}: idle {idle} MiB, held {held.memory_used_mib} MiB, NVML pids {[p.pid for p in held.processes]}"
    )
    assert held.memory_used_mib >= idle + 8 * 1024 - 512
    teardown = _teardown(nvml, tmp_path)
    plan = asyncio.run(teardown.plan((0,)))
    reasons = next(v.reasons for v in plan.victims if v.pid == holder.pid)
    print("holder reasons:", reasons)
    assert any("NVML" in r for r in reasons) or any(r.startswith("maps /dev/nvidia") for r in reasons)
    assert os.getpid() not in {v.pid for v in plan.victims}  # we hold NVML open, not a context
    _safe_plan(teardown, (0,), {holder.pid})
    report = asyncio.run(teardown.run((0,)))
    print("steps:", {k: round(v, 4) for k, v in report.steps.items()}, "verify:", report.verify)
    assert report.ok, report.error
    assert holder.wait(timeout=10) < 0
    outcome = next(o for o in report.processes if o.pid == holder.pid)
    assert outcome.outcome == "exited after SIGTERM"
    after = nvml.gpus()[0]
    assert after.processes == ()
    assert after.memory_used_mib <= idle + 1024


def test_per_gpu_verification(nvml: NvmlGpus, holders: Holders, tmp_path: Path) -> None:
    if len(nvml.gpus()) < 2:
        pytest.skip("needs two GPUs (nvidia-h200-x2)")
    holder = holders(1, 8)
    # GPU 0 alone is clean; GPUs 0-1 are not, and the failure names GPU 1 and the holder only.
    assert asyncio.run(verify(nvml, (0,), idle_mib={}, slack_mib=1024, samples=2, within_s=2)).ok
    dirty = asyncio.run(verify(nvml, (0, 1), idle_mib={}, slack_mib=1024, samples=2, within_s=0.5))
    print("dirty verify:", dirty.message)
    assert not dirty.ok
    assert dirty.message.startswith("GPU 1:")
    assert "GPU 0" not in dirty.message
    if nvml.gpus()[1].processes:  # NVML lists the holder where the runtime lets it see PIDs
        assert str(holder.pid) in dirty.message
    teardown = _teardown(nvml, tmp_path)
    _safe_plan(teardown, (0, 1), {holder.pid})
    report = asyncio.run(teardown.run((0, 1)))
    assert report.ok, report.error
    assert report.verify is not None
    assert [g.index for g in report.verify.gpus] == [0, 1]
    assert all(g.clean for g in report.verify.gpus)
    print("per-GPU verify:", report.verify.gpus, f"{report.steps['total_s']:.3f}s")


def test_an_engine_titled_holder_on_another_gpu_survives(
    nvml: NvmlGpus, holders: Holders, tmp_path: Path
) -> None:
    """Seen on an H200: a VLLM::Worker holding GPU 1 was killed by a teardown of GPU 0, for its title alone."""
    if len(nvml.gpus()) < 2:
        pytest.skip("needs two GPUs (nvidia-h200-x2)")
    other = holders(1, 4, "VLLM::Worker_TP1")
    mine = holders(0, 4, "VLLM::Worker_TP0")
    teardown = _teardown(nvml, tmp_path)
    plan = asyncio.run(teardown.plan((0,)))
    spared = {s.pid: s.reason for s in plan.spared}
    print(
        "GPU 0 plan victims:",
        {v.pid: v.reasons for v in plan.victims},
        "spared other:",
        spared.get(other.pid),
    )
    assert spared[other.pid] == "holds GPU 1 only, outside this teardown's GPUs (0)"
    _safe_plan(teardown, (0,), {mine.pid})
    report = asyncio.run(teardown.run((0,)))
    assert report.ok, report.error
    assert mine.wait(timeout=10) < 0
    assert other.poll() is None  # still alive, still holding GPU 1
    assert other.pid in [p.pid for p in nvml.gpus()[1].processes] or nvml.gpus()[1].memory_used_mib > 4 * 1024
    print(
        "after GPU 0 teardown:",
        f"{report.steps['total_s']:.3f}s",
        "GPU 1 used",
        nvml.gpus()[1].memory_used_mib,
        "MiB",
    )


def test_a_forced_nvml_failure_fails_verify(
    nvml: NvmlGpus, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import pynvml

    assert asyncio.run(verify(nvml, (0,), idle_mib={}, slack_mib=1024, samples=2, within_s=5)).ok

    def broken(_handle: object) -> object:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", broken)
    failed = asyncio.run(verify(nvml, (0,), idle_mib={}, slack_mib=1024, samples=2, within_s=5))
    print("verify with NVML failing:", failed.ok, failed.message)
    assert not failed.ok
    assert failed.message.startswith("cannot verify the GPUs: NVML failed")
    teardown = _teardown(nvml, tmp_path)
    _safe_plan(teardown, (0,), set())  # without NVML, only mappings and titles: none of them may be ours
    report = asyncio.run(teardown.run((0,)))
    print("teardown with NVML failing:", report.ok, report.error)
    assert not report.ok
