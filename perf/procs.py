"""The benchmarks' own servers: a free port, and a process of ours served until /health answers 200, then
stopped (SIGTERM, and SIGKILL of its own process group if it does not go)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from k25_sandbox.ports import free_port

__all__ = ["free_port", "serving"]


@contextlib.contextmanager
def serving(
    cmd: list[str],
    port: int,
    *,
    env: dict[str, str] | None = None,
    within_s: float = 30,
    log: Path | None = None,
) -> Iterator[str]:
    """Start `cmd` in a session of its own, yield its URL once /health is 200, stop it at the end."""
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + within_s
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{cmd[0]} exited {proc.returncode}" + (f"; see {log}" if log else ""))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"{cmd[0]} not healthy within {within_s:g}s")
            time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # our own session: the server and whatever it started
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
