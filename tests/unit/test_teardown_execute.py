"""Teardown end to end over the real procfs, pidfds and a private shm folder, with victims that this test
starts itself (marked by a unique process title): SIGTERM, SIGKILL for the one that ignores it, bystanders
untouched, shm files removed or kept, the simulated GPU verified free."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from daemon.host.gpu import SimulatedGpus
from daemon.host.procs import ProcfsProcesses
from daemon.host.shm import DevShm
from daemon.host.signals import PidfdControl
from daemon.teardown import TeardownPolicy
from daemon.teardown_exec import Teardown

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

    yield World(tag, dev, shm, tmp_path, start)
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
    from dataclasses import replace

    from daemon.errors import Refused

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
    assert replace(policy, foreign="kill").foreign == "kill"
