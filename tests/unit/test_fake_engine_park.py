"""The fake engine parks as the real ones do (groundwork for the parking issue): the flavour's endpoints,
its GPU memory given back (the workers unmap the fake device files, so the simulated GPU frees it) and
taken again on wake, requests refused while asleep, and the faults the engines' trackers report."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from daemon.sandbox.layout import free_port
from tests.waiting import eventually_sync

Start = Callable[..., "Engine"]


class Engine:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], device: Path) -> None:
        self.url, self.proc, self.device = url, proc, device

    def mapped(self) -> bool:
        """Does any of its workers map the GPU device file (hold GPU memory)?"""
        workers = psutil.Process(self.proc.pid).children()
        return any(str(self.device) in Path(f"/proc/{w.pid}/maps").read_text() for w in workers)

    def complete(self) -> int:
        body = {"model": "kimi-k2.5", "prompt": "hi", "max_tokens": 2}
        return httpx.post(f"{self.url}/v1/completions", json=body, timeout=10).status_code


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[subprocess.Popen[bytes]] = []

    def run(flavor: str, *extra: str) -> Engine:
        dev, shm = tmp_path / "dev", tmp_path / "shm"
        dev.mkdir(exist_ok=True)
        shm.mkdir(exist_ok=True)
        (dev / "nvidia0").write_bytes(b"\0" * 4096)
        port = free_port()
        argv = [sys.executable, "-m", "daemon.sandbox.fake_engine", "--flavor", flavor, "--port", str(port),
                "--load-seconds", "0.2", "--warmup-seconds", "0", "--device-dir", str(dev), "--shm-dir", str(shm),
                "--park", "--wake-gbps", "1000", *extra]  # fmt: skip
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="0", K25_CONFIG=str(tmp_path / "absent.toml"))
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        eventually_sync(lambda: httpx.get(f"{url}/health").status_code == 200, what="the fake engine serves",
                        within_s=30, every_s=0.05, tolerate=(httpx.HTTPError,))  # fmt: skip
        return Engine(url, proc, dev / "nvidia0")

    yield run
    for proc in started:  # the engines this test started, and only those
        proc.terminate()
        proc.wait(timeout=10)


def test_vllm_sleeps_gives_its_gpu_memory_back_and_wakes(start: Start) -> None:
    engine = start("vllm")
    assert engine.mapped()
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": False}
    assert httpx.post(f"{engine.url}/sleep", params={"level": 1}).status_code == 200
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": True}
    eventually_sync(lambda: not engine.mapped(), what="the GPU memory given back", within_s=10, every_s=0.05)
    assert engine.complete() == 503  # asleep: no generation
    pid = engine.proc.pid
    assert httpx.post(f"{engine.url}/wake_up").status_code == 200
    eventually_sync(engine.mapped, what="the GPU memory taken again", within_s=10, every_s=0.05)
    assert engine.complete() == 200
    assert engine.proc.pid == pid  # the same process: nothing was reloaded


def test_sglang_releases_and_resumes(start: Start) -> None:
    engine = start("sglang")
    assert httpx.post(f"{engine.url}/release_memory_occupation", json={}).status_code == 200
    eventually_sync(lambda: not engine.mapped(), what="released", within_s=10, every_s=0.05)
    assert httpx.post(f"{engine.url}/resume_memory_occupation", json={}).status_code == 200
    eventually_sync(engine.mapped, what="resumed", within_s=10, every_s=0.05)


def test_the_engines_parking_faults(start: Start) -> None:
    keeps = start("vllm", "--fault", "sleep-keeps-memory")
    assert httpx.post(f"{keeps.url}/sleep", params={"level": 1}).status_code == 200  # says yes...
    assert httpx.get(f"{keeps.url}/is_sleeping").json() == {"is_sleeping": True}
    assert keeps.mapped()  # ...and holds the memory all the same
    fails = start("vllm", "--fault", "wake-fails")
    httpx.post(f"{fails.url}/sleep", params={"level": 1})
    assert httpx.post(f"{fails.url}/wake_up").status_code == 500
