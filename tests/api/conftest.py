"""API tests: the FastAPI app through httpx's ASGI transport, a real SQLite file, fake host ports."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from daemon.core.settings import Settings
from daemon.host.gpu import NoGpus
from daemon.startup.app import create_app
from daemon.startup.machine import HostPorts
from k25_sandbox.fake_http import build_app
from k25_sandbox.fake_stats import FakeConfig
from tests.api.fakes import FakeJournal, FakeProber, FakeSystemd, FakeTimers, fake_teardown
from tests.slow_callbacks import SlowCallbacks
from tests.waiting import eventually

PROFILE = 'engine = "vllm"\nmodel = "/m"\nport = {port}\ntensor_parallel_size = 1\ngpus = [0]\nprobe_timeout_s = 5\n'
TOKEN = "s3cret-token"


@dataclass
class Env:
    client: httpx.AsyncClient
    systemd: FakeSystemd
    prober: FakeProber
    settings: Settings
    auth: dict[str, str]
    app: FastAPI
    journal: FakeJournal


@pytest.fixture(autouse=True)
async def _no_blocking_call_on_the_loop() -> AsyncIterator[None]:
    """Every API test runs with asyncio's debug mode: a callback of the daemon's that blocks the loop for
    over 100 ms (a sync call where an await or a thread belongs) fails the test that drove it."""
    with SlowCallbacks(asyncio.get_running_loop()) as slow:
        yield
    assert slow.seen == [], "blocking calls on the event loop:\n" + "\n".join(slow.seen)


@pytest.fixture(autouse=True)
def _no_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings come from the test alone, never from this machine's /etc/k25-ctl (undone after each test)."""
    monkeypatch.setenv("K25_CONFIG", str(tmp_path / "absent.toml"))


def make_settings(tmp_path: Path, **overrides: object) -> Settings:
    profiles = tmp_path / "profiles.d"
    profiles.mkdir(exist_ok=True)
    for i, name in enumerate(("baseline", "alpha", "beta")):
        (profiles / f"{name}.toml").write_text(PROFILE.format(port=9100 + i))
    (profiles / "broken.toml").write_text('engine = "vllm"\nport = 9200\n')
    token = tmp_path / "token"
    if not token.exists():
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
    overrides = {"allowed_hosts": ["k25"]} | overrides  # the test client's Host
    return Settings(config_dir=tmp_path, state_dir=tmp_path / "state", check_model_paths=False, gpu_backend="none",
                    **overrides)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with running_env(tmp_path) as e:
        yield e


@contextlib.asynccontextmanager
async def running_env(tmp_path: Path, **overrides: object) -> AsyncIterator[Env]:
    """The app with fake host ports and a fast serving watch (the fakes answer at once); `overrides` are
    settings."""
    settings = make_settings(
        tmp_path,
        **{
            "watch_interval_s": 0.05,
            "stall_s": 0.5,
            "restart_backoff_s": 0.0,
            "metrics_row_s": 0.3,
            "residency_every_s": 0.2,
            "drain_grace_s": 0.0,
            "drain_poll_s": 0.01,
        }
        | overrides,
    )
    journal = FakeJournal()
    units = {
        "vllm-kimi-k25-int4.service",
        *(f"k25-engine@{n}.service" for n in ("baseline", "alpha", "beta")),
    }
    systemd = FakeSystemd(journal, units)
    prober = FakeProber(systemd)
    timers = FakeTimers()

    # The benchmark's requests go to a fake vLLM in-process (k=3 drafts, half of them accepted).
    engine = build_app(FakeConfig("vllm", "m", rate=5000.0, spec_tokens=3, acceptance=0.5, warmup_s=0.0,
                                  deadlock=False), time.monotonic(), lambda: None)  # fmt: skip

    def bench_http(connections: int, timeout_s: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=engine), timeout=timeout_s)

    def ports(_: Settings) -> HostPorts:
        return HostPorts(
            systemd=systemd,
            journal=journal,
            gpus=NoGpus(),
            teardown=fake_teardown(),
            prober=prober,
            bench_http=bench_http,
            timers=timers,
        )

    app = create_app(settings, ports)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://k25") as client:
            yield Env(client, systemd, prober, settings, {"Authorization": f"Bearer {TOKEN}"}, app, journal)


async def wait_run(env: Env, run_id: int) -> Any:
    """The run once it has ended and the job that ran it is over (its last steps after the run's final
    record: the host back in rotation, the job's place given up), within a deadline."""
    jobs = env.app.state.services.jobs

    async def ended() -> Any:
        run = (await env.client.get(f"/runs/{run_id}")).json()
        return run if run["outcome"] != "running" and jobs.find(run_id) is None else None

    return await eventually(ended, what=f"run {run_id} ends")
