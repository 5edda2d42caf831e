"""API tests: the FastAPI app through httpx's ASGI transport, a real SQLite file, fake host ports."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from daemon.api.app import HostPorts, create_app
from daemon.host.gpu import NoGpus
from daemon.settings import Settings
from tests.api.fakes import FakeJournal, FakeProber, FakeSystemd, fake_teardown

PROFILE = 'engine = "vllm"\nmodel = "/m"\nport = {port}\ntensor_parallel_size = 1\ngpus = [0]\nprobe_timeout_s = 5\n'
TOKEN = "s3cret-token"


@dataclass
class Env:
    client: httpx.AsyncClient
    systemd: FakeSystemd
    prober: FakeProber
    settings: Settings
    auth: dict[str, str]


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
    os.environ["K25_CONFIG"] = str(tmp_path / "absent.toml")
    return Settings(config_dir=tmp_path, state_dir=tmp_path / "state", check_model_paths=False, gpu_backend="none",
                    **overrides)  # type: ignore[arg-type]  # fmt: skip


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    settings = make_settings(tmp_path)
    journal = FakeJournal()
    units = {
        "vllm-kimi-k25-int4.service",
        *(f"k25-engine@{n}.service" for n in ("baseline", "alpha", "beta")),
    }
    systemd = FakeSystemd(journal, units)
    prober = FakeProber(systemd)

    def ports(_: Settings) -> HostPorts:
        return HostPorts(
            systemd=systemd, journal=journal, gpus=NoGpus(), teardown=fake_teardown(), prober=prober
        )  # type: ignore[arg-type]

    app = create_app(settings, ports)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://k25") as client:
            yield Env(client, systemd, prober, settings, {"Authorization": f"Bearer {TOKEN}"})
