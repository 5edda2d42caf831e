"""Parking on a real GPU (groundwork for the parking issue): a CUDA process that sleeps as vLLM does
(level 1: weights to pinned host memory, the GPU memory freed) survives a teardown of its GPU that kills
another holder; the verification accepts its residual and nothing more; its wake brings the weights back bit
for bit, and is timed against a hot page-cache load of the same bytes through the warm path."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.host.gpu import NvmlGpus
from daemon.host.pagecache import PageCache
from daemon.teardown.execute import verify
from daemon.teardown.plan import Parked
from tests.gpu.conftest import Holders
from tests.gpu.test_teardown_gpu import _teardown

SLEEPER = Path(__file__).with_name("sleeper.py")
GIB = 8.0


@pytest.fixture
def sleeper(nvml: NvmlGpus) -> Iterator[tuple[subprocess.Popen[str], str]]:
    p, url = _start_sleeper(GIB)
    yield p, url
    p.terminate()  # the process this test started
    p.wait(timeout=30)


def _call(method: str, url: str) -> tuple[int, dict[str, object]]:
    """The device machine has no httpx: the standard library's client."""
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)  # noqa: S310
    with urllib.request.urlopen(req, timeout=300) as r:  # noqa: S310 - our own sleeper on loopback
        return r.status, json.loads(r.read())


def _held_by(nvml: NvmlGpus, pid: int) -> int:
    return sum(gp.used_mib or 0 for g in nvml.gpus() if g.index == 0 for gp in g.processes if gp.pid == pid)


def test_a_parked_engine_survives_the_teardown_and_wakes_bit_exact(
    nvml: NvmlGpus, holders: Holders, sleeper: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    proc, url = sleeper
    before = _call("GET", f"{url}/checksum")[1]["checksum"]
    awake = nvml.gpus()[0].memory_used_mib
    assert _call("POST", f"{url}/sleep?level=1")[0] == 200
    assert _call("GET", f"{url}/is_sleeping")[1] == {"is_sleeping": True}
    asleep, residual = nvml.gpus()[0].memory_used_mib, _held_by(nvml, proc.pid)
    print(f"NVML GPU 0: {awake} MiB with the sleeper awake ({GIB:g} GiB of weights), {asleep} MiB asleep; "
          f"the sleeper's residual {residual} MiB")  # fmt: skip
    assert awake - asleep >= GIB * 1024 - 256  # the weights left the GPU

    teardown = _teardown(nvml, tmp_path)
    # What a switch checks after the sleep (Parking): only its processes, within park_residual_mib.
    bound = Parked("parking sleeper", frozenset({proc.pid}), {0: 6144})
    checked = asyncio.run(teardown.verify_parked((0,), bound))
    print("verify_parked after the sleep:", checked)
    assert checked.ok, checked.message
    recorded = checked.gpus[0].used_mib - teardown.idle_mib.get(0, 0)  # the residual a switch records
    other = holders(0, 4)  # the engine switched away from, on the same GPU
    parked = Parked(f"parked sleeper (pid {proc.pid})", frozenset({proc.pid}), {0: recorded})
    plan = asyncio.run(teardown.plan((0,), parked=(parked,)))
    victims = {v.pid for v in plan.victims}
    if victims != {other.pid}:  # the device machine is not ours to clean: only our own holder may go
        pytest.fail(f"the plan's victims {sorted(victims)} are not exactly our holder {other.pid}")
    assert any(s.pid == proc.pid and s.reason.startswith("parked sleeper") for s in plan.spared)
    report = asyncio.run(teardown.run((0,), parked=(parked,)))
    print("teardown with a parked engine:", report.verify)
    assert report.ok, report.error
    assert other.wait(timeout=10) < 0
    assert proc.poll() is None  # asleep, and alive

    assert _call("POST", f"{url}/grow?gib=2")[0] == 200
    grown = asyncio.run(verify(nvml, (0,), idle_mib=teardown.idle_mib, slack_mib=1024, samples=2, within_s=2,
                               parked=(parked,)))  # fmt: skip
    print("verify after the parked engine grew by 2 GiB:", grown.message)
    assert not grown.ok

    woke = float(_call("POST", f"{url}/wake_up")[1]["seconds"])  # type: ignore[arg-type]
    assert _call("GET", f"{url}/checksum")[1]["checksum"] == before  # bit for bit
    hot = _hot_load_seconds(tmp_path / "weights.bin", int(GIB * 2**30))
    gb = GIB * 2**30 / 1e9
    print(f"wake {woke:.3f}s ({gb / woke:.1f} GB/s); hot page-cache load of the same bytes through the warm "
          f"path {hot:.3f}s ({gb / hot:.1f} GB/s); wake/hot = {woke / hot:.3f} (target <= 0.25)")  # fmt: skip


def _hot_load_seconds(path: Path, size: int) -> float:
    """The same bytes from a file the warm path has read into the page cache, into GPU memory (what a cold
    engine start costs at best: its weights come from the cache). In a process of its own: this test
    process must hold no CUDA context (the teardown tests that follow verify the GPU empty)."""
    with path.open("wb") as f:
        chunk = os.urandom(64 << 20)
        for _ in range(size // len(chunk)):
            f.write(chunk)
    PageCache().read_into_cache(path, block=16 << 20, idle_io=False, progress=lambda _: None,
                                stop=threading.Event())  # fmt: skip
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="0")
    out = subprocess.run([sys.executable, str(SLEEPER), "--hot-load", str(path), str(size)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    path.unlink()
    return float(out.stdout.strip())


def _start_sleeper(gib: float) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="0")
    p = subprocess.Popen([sys.executable, str(SLEEPER), str(gib)], stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdout is not None
    line = p.stdout.readline().split()
    assert line[0] == "ready", line
    return p, f"http://127.0.0.1:{line[1]}"


@pytest.fixture
def start_sleeper(nvml: NvmlGpus) -> Iterator[Callable[[float], tuple[subprocess.Popen[str], str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(gib: float) -> tuple[subprocess.Popen[str], str]:
        p, url = _start_sleeper(gib)
        started.append(p)
        return p, url

    yield start
    for p in started:  # the processes this test started
        p.terminate()
        p.wait(timeout=30)


def test_two_parked_engines_are_each_verified_spared_by_a_teardown_and_woken_bit_exact(
    nvml: NvmlGpus,
    holders: Holders,
    start_sleeper: Callable[[float], tuple[subprocess.Popen[str], str]],
    tmp_path: Path,
) -> None:
    """Every profile one wake away (#37): two engines asleep on one GPU at once, each verified within its own
    residual (the other's memory is not its allowance), a teardown for a third engine that kills only that
    engine's holder, and each woken with its weights bit for bit."""
    teardown = _teardown(nvml, tmp_path)
    two_sleepers, sums, parked = [], [], list[Parked]()
    for i in range(2):  # one engine after the other, as switches park them: each started, then put to sleep
        proc, url = start_sleeper(4.0)
        two_sleepers.append((proc, url))
        sums.append(_call("GET", f"{url}/checksum")[1]["checksum"])
        assert _call("POST", f"{url}/sleep?level=1")[0] == 200
        assert _call("GET", f"{url}/is_sleeping")[1] == {"is_sleeping": True}
        bound = Parked(f"parking sleeper {i}", frozenset({proc.pid}), {0: 6144})
        # As Parking verifies a sleep: beside the engines parked before it, each within what it recorded.
        checked = asyncio.run(teardown.verify_parked((0,), bound, tuple(parked)))
        recorded = (
            checked.gpus[0].used_mib - teardown.idle_mib.get(0, 0) - sum(p.residual_mib[0] for p in parked)
        )
        print(f"sleeper {i} (pid {proc.pid}) asleep: NVML says it holds {_held_by(nvml, proc.pid)} MiB, "
              f"recorded residual {recorded} MiB;", checked.message)  # fmt: skip
        assert checked.ok, checked.message
        assert 0 <= recorded <= 6144
        parked.append(Parked(f"parked sleeper {i}", frozenset({proc.pid}), {0: recorded}))
    other = holders(0, 4)  # the engine the next switch stops
    plan = asyncio.run(teardown.plan((0,), parked=tuple(parked)))
    victims = {v.pid for v in plan.victims}
    if victims != {other.pid}:  # the device machine is not ours to clean: only our own holder may go
        pytest.fail(f"the plan's victims {sorted(victims)} are not exactly our holder {other.pid}")
    spared = {s.pid for s in plan.spared}
    assert {p.pid for p, _ in two_sleepers} <= spared, plan.spared
    report = asyncio.run(teardown.run((0,), parked=tuple(parked)))
    print("teardown with two parked engines:", report.verify)
    assert report.ok, report.error
    assert other.wait(timeout=10) < 0
    for i, (proc, url) in enumerate(two_sleepers):
        assert proc.poll() is None  # asleep, and alive
        woke = float(_call("POST", f"{url}/wake_up")[1]["seconds"])  # type: ignore[arg-type]
        assert _call("GET", f"{url}/checksum")[1]["checksum"] == sums[i]  # bit for bit
        print(f"sleeper {i} woke in {woke:.3f}s, its weights bit for bit")
        if i == 0:  # the other still sleeps: its residual is all it holds
            assert _held_by(nvml, two_sleepers[1][0].pid) <= 6144
