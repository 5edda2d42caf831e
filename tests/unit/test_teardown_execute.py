"""Teardown end to end over the real procfs, pidfds and a private shm folder, with victims that this test
starts itself (marked by a unique process title): SIGTERM, SIGKILL for the one that ignores it, bystanders
untouched, shm files removed or kept, the simulated GPU verified free."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from daemon.core.errors import Refused
from daemon.host.gpu import GpuUnavailable, NoGpus, NvmlGpus, SimulatedGpus
from daemon.host.procs import ProcfsProcesses
from daemon.host.shm import DevShm
from daemon.host.signals import PidfdControl
from daemon.teardown.execute import Teardown, execute, verify
from daemon.teardown.plan import Parked, TeardownPolicy
from tests.api.fakes import BrokenNvml

CHILD = """
import mmap, os, signal, sys, time, setproctitle
title, device, ignore, hold = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
setproctitle.setproctitle(title)
maps = []
if device != "-":
    fd = os.open(device, os.O_RDWR); maps.append(mmap.mmap(fd, 4096)); os.close(fd)
if hold != "-":
    f = open(hold, "rb")
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
while True:
    signal.pause()
"""


@dataclass
class World:
    tag: str
    dev: Path
    shm: Path
    tmp: Path
    start: Callable[..., subprocess.Popen[str]]
    children: list[subprocess.Popen[str]]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    tag = f"k25test-{uuid.uuid4().hex[:8]}"
    dev, shm = tmp_path / "dev", tmp_path / "shm"
    dev.mkdir()
    shm.mkdir()
    for i in range(2):
        (dev / f"nvidia{i}").write_bytes(b"\0" * 4096)
    (shm / "psm_stale").write_bytes(b"x" * 100)
    (shm / "PostgreSQL.1234").write_bytes(b"pg")
    (tmp_path / "precious").write_text("keep me")
    (shm / "psm_link").symlink_to(tmp_path / "precious")
    children: list[subprocess.Popen[str]] = []

    def start(title: str, device: str = "-", ignore: bool = False, hold: str = "-") -> subprocess.Popen[str]:
        c = subprocess.Popen([sys.executable, "-c", CHILD, title, device, "1" if ignore else "0", hold],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
        children.append(c)
        assert c.stdout is not None
        assert c.stdout.readline().strip() == "ready"
        return c

    yield World(tag, dev, shm, tmp_path, start, children)
    for c in children:
        if c.poll() is None:
            c.kill()
        c.wait()


async def test_teardown_sigterm_sigkill_shm_and_verify(world: World) -> None:
    tag, dev, shm, start = world.tag, world.dev, world.shm, world.start
    polite = start(f"{tag}::Worker_TP0", str(dev / "nvidia0"))
    stubborn = start(f"{tag}::Worker_TP1", str(dev / "nvidia1"), ignore=True)
    bystander = start("python3 bystander", hold=str(shm / "PostgreSQL.1234"))
    monitor = start("python3 monitor")  # no device: a process the plan must not touch

    procs = ProcfsProcesses()
    glob = f"{dev}/nvidia*"
    gpus = SimulatedGpus(procs, glob, count=2, total_mib=1000, holder_mib=300, idle_mib=4)
    assert [g.memory_used_mib for g in gpus.gpus()] == [304, 304]
    policy = TeardownPolicy(glob, (f"{tag}::*",), ("psm_*",), ("nvidia-persistenced",))
    teardown = Teardown(procs, gpus, DevShm(shm), PidfdControl(), policy, term_grace_s=2, kill_grace_s=10,
                        verify_timeout_s=10, verify_samples=3, slack_mib=16)  # fmt: skip

    plan = await teardown.plan()
    assert {v.pid for v in plan.victims} == {polite.pid, stubborn.pid}
    report = await teardown.run()

    by_pid = {o.pid: o for o in report.processes}
    assert by_pid[polite.pid].signals == ["SIGTERM"]
    assert by_pid[polite.pid].outcome == "exited after SIGTERM"
    assert by_pid[stubborn.pid].signals == ["SIGTERM", "SIGKILL"]
    assert by_pid[stubborn.pid].outcome == "killed by SIGKILL"
    assert polite.wait(timeout=5) == 0 or polite.returncode < 0
    assert bystander.poll() is None
    assert monitor.poll() is None
    assert report.shm_removed == ["psm_stale"]
    kept = {k["name"]: k["reason"] for k in report.shm_kept}
    assert kept["PostgreSQL.1234"] == "not an engine file"
    assert kept["psm_link"] == "not a regular file (never followed)"
    assert (shm / "PostgreSQL.1234").exists()
    assert (world.tmp / "precious").read_text() == "keep me"
    assert report.verify is not None
    assert report.verify.ok
    assert report.ok
    assert {"plan_s", "sigterm_s", "sigkill_s", "shm_s", "verify_s", "total_s"} <= set(report.steps)
    assert os.getpid() not in by_pid


async def test_refuse_policy_raises_and_touches_nothing(world: World) -> None:
    tag, dev, shm, start = world.tag, world.dev, world.shm, world.start
    holder = start(f"{tag}::Worker_TP0", str(dev / "nvidia0"))
    procs = ProcfsProcesses()
    glob = f"{dev}/nvidia*"
    policy = TeardownPolicy(glob, (f"{tag}::*",), ("psm_*",), (), foreign="refuse")
    teardown = Teardown(procs, SimulatedGpus(procs, glob, count=2), DevShm(shm), PidfdControl(), policy,
                        term_grace_s=2, kill_grace_s=2, verify_timeout_s=2, verify_samples=1, slack_mib=0)  # fmt: skip
    with pytest.raises(Refused, match=str(holder.pid)):
        await teardown.run()
    assert holder.poll() is None
    assert (shm / "psm_stale").exists()
    # The same holder under policy `kill` goes: the refusal above came from the policy alone.
    teardown.policy = replace(policy, foreign="kill")
    report = await teardown.run()
    assert [o.pid for o in report.processes] == [holder.pid]
    assert holder.wait(timeout=10) != 0


def _teardown(world: World, procs: ProcfsProcesses, **kw: Any) -> Teardown:
    glob = f"{world.dev}/nvidia*"
    policy = TeardownPolicy(
        glob, (f"{world.tag}::*",), ("psm_*",), (), front_end_titles=(f"{world.tag} serve *",)
    )
    gpus: Any = kw.pop("gpus", None) or SimulatedGpus(procs, glob, count=2)
    return Teardown(procs, gpus, DevShm(world.shm), PidfdControl(), policy, **({"term_grace_s": 30,
                    "kill_grace_s": 10, "verify_timeout_s": 5, "verify_samples": 1, "slack_mib": 0} | kw))  # fmt: skip


async def test_an_orphan_that_ignores_sigterm_gets_sigkill_after_the_short_grace(world: World) -> None:
    stubborn = world.start(f"{world.tag}::EngineCore", str(world.dev / "nvidia0"), ignore=True)
    polite = world.start(f"{world.tag}::Worker_TP1", str(world.dev / "nvidia1"))
    teardown = _teardown(world, ProcfsProcesses(), orphan_grace_s=0.3)
    p = await teardown.plan()
    # Our children have a live parent (this test): mark the stubborn one as the plan marks an orphan.
    p = replace(p, victims=[replace(v, orphan=v.pid == stubborn.pid) for v in p.victims])
    report = await execute(p, teardown.control, term_grace_s=30, kill_grace_s=10, orphan_grace_s=0.3)
    by_pid = {o.pid: o for o in report.processes}
    assert (by_pid[stubborn.pid].signals, by_pid[stubborn.pid].outcome) == (
        ["SIGTERM", "SIGKILL"],
        "killed by SIGKILL",
    )
    assert (by_pid[stubborn.pid].orphan, by_pid[stubborn.pid].grace_s) == (True, 0.3)
    assert (by_pid[polite.pid].outcome, by_pid[polite.pid].grace_s) == ("exited after SIGTERM", 30)


def _listener(world: World, title: str) -> tuple[subprocess.Popen[str], int]:
    code = ("import socket, sys, signal, setproctitle; setproctitle.setproctitle(sys.argv[1]); "
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); signal.pause()")  # fmt: skip
    c = subprocess.Popen([sys.executable, "-c", code, title], stdout=subprocess.PIPE, text=True)
    world.children.append(c)
    assert c.stdout is not None
    return c, int(c.stdout.readline())


async def test_a_foreign_process_on_the_next_port_blocks_before_any_signal(world: World) -> None:
    engine = world.start(f"{world.tag}::Worker_TP0", str(world.dev / "nvidia0"))
    other, port = _listener(world, f"{world.tag}-web-app")
    teardown = _teardown(world, ProcfsProcesses())
    with pytest.raises(Refused, match=f"port {port} is held by PID {other.pid} \\({world.tag}-web-app\\)"):
        await teardown.run(ports=(port,))
    assert engine.poll() is None  # nothing was signalled
    assert other.poll() is None


async def test_an_engine_front_end_on_the_next_port_is_killed(world: World) -> None:
    api, port = _listener(world, f"{world.tag} serve /models/tiny")
    teardown = _teardown(world, ProcfsProcesses())
    report = await teardown.run(ports=(port,))
    assert [(o.pid, o.outcome) for o in report.processes] == [(api.pid, "exited after SIGTERM")]
    assert f"listens on port {port}" in report.processes[0].reasons[0]


async def test_an_nvml_failure_fails_the_teardown_never_clean(world: World) -> None:
    teardown = _teardown(world, ProcfsProcesses(), gpus=BrokenNvml())
    assert (await teardown.plan()).gpu_error == "NVML failed: Unknown Error"
    report = await teardown.run()
    assert not report.ok
    assert report.error is not None
    assert "cannot verify the GPUs: NVML failed: Unknown Error" in report.error
    checked = await verify(BrokenNvml(), (0,), idle_mib={}, slack_mib=0, samples=1, within_s=1)
    assert not checked.ok


async def test_an_expected_gpu_that_is_missing_fails_verify(world: World) -> None:
    gpus = SimulatedGpus(ProcfsProcesses(), f"{world.dev}/nvidia*", count=2)
    missing = await verify(gpus, (0, 7), idle_mib={}, slack_mib=0, samples=1, within_s=1)
    assert (missing.ok, missing.message) == (False, "GPU 7 not visible (visible: 0, 1)")
    none = await verify(SimulatedGpus(ProcfsProcesses(), "/nonexistent/nvidia*", count=0), None,
                        idle_mib={}, slack_mib=0, samples=1, within_s=1)  # fmt: skip
    assert not none.ok
    assert (
        await verify(NoGpus(), (0,), idle_mib={}, slack_mib=0, samples=1, within_s=1)
    ).ok  # gpu_backend none


def test_nvml_that_cannot_start_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def fail() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with pytest.raises(GpuUnavailable, match="NVML cannot be initialised"):
        NvmlGpus().gpus()


async def test_a_parked_engine_is_spared_and_allowed_its_residual(world: World) -> None:
    tag, dev, shm, start = world.tag, world.dev, world.shm, world.start
    parked = start(f"{tag}::Worker_TP0", str(dev / "nvidia0"))  # asleep on purpose, still mapping GPU 0
    other = start(f"{tag}::Worker_TP1", str(dev / "nvidia0"))  # the engine being switched away from
    procs = ProcfsProcesses()
    glob = f"{dev}/nvidia*"
    gpus = SimulatedGpus(procs, glob, count=2, total_mib=1000, holder_mib=300, idle_mib=4)
    policy = TeardownPolicy(glob, (f"{tag}::*",), ("psm_*",), ())
    teardown = Teardown(procs, gpus, DevShm(shm), PidfdControl(), policy, term_grace_s=2, kill_grace_s=5,
                        verify_timeout_s=1, verify_samples=2, slack_mib=16)  # fmt: skip
    keep = Parked("parked profile baseline (sleeping since 03:12)", frozenset({parked.pid}), {0: 300})
    plan = await teardown.plan((0,), parked=(keep,))
    assert [v.pid for v in plan.victims] == [other.pid]
    spared = {s.pid: s.reason for s in plan.spared}
    assert spared[parked.pid].startswith("parked profile baseline (sleeping since 03:12)")
    report = await teardown.run((0,), parked=(keep,))
    assert report.ok, report.error
    assert other.wait(timeout=5) is not None
    assert parked.poll() is None  # it sleeps on
    assert report.verify is not None
    assert report.verify.gpus[0].limit_mib == 16 + 300  # slack + the parked residual (no idle sample yet)
    # More than it held when parked (it grew, or never released): not clean.
    tight = Parked(keep.reason, keep.pids, {0: 100})
    grown = await verify(gpus, (0,), idle_mib={0: 4}, slack_mib=16, samples=1, within_s=0.2, parked=(tight,))
    assert not grown.ok
    assert grown.message == "GPU 0: 304 MiB used (limit 120), pids []"
    # Not parked at all: its process on the GPU fails the verification whatever the memory.
    assert not (await verify(gpus, (0,), idle_mib={0: 1000}, slack_mib=0, samples=1, within_s=0.2)).ok
