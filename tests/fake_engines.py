"""Fake engines (k25_sandbox.fake_engine) run as processes of a test, without the sandbox: the `start`
fixture starts them on free ports and stops the ones it started."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from daemon.engines import ENGINES
from k25_sandbox.ports import free_port
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

    def answer(self) -> str:
        body = {"model": "kimi-k2.5", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
        r = httpx.post(f"{self.url}/v1/completions", json=body, timeout=10)
        assert r.status_code == 200, r.text
        text: str = r.json()["choices"][0]["text"]
        return text

    def post(self, path: str, **kw: object) -> int:
        return httpx.post(f"{self.url}{path}", json=kw or {}, timeout=10).status_code


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Start]:
    started: list[subprocess.Popen[bytes]] = []

    def run(flavor: str, *extra: str, park: tuple[str, ...] | None = None) -> Engine:
        dev, shm = tmp_path / "dev", tmp_path / "shm"
        dev.mkdir(exist_ok=True)
        shm.mkdir(exist_ok=True)
        (dev / "nvidia0").write_bytes(b"\0" * 4096)
        port = free_port()
        argv = [sys.executable, "-m", "k25_sandbox.fake_engine", "--flavor", flavor, "--port", str(port),
                "--load-seconds", "0.2", "--warmup-seconds", "0", "--device-dir", str(dev), "--shm-dir", str(shm),
                "--wake-gbps", "1000", *(ENGINES[flavor].park_flag_reasons if park is None else park), *extra]  # fmt: skip
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
