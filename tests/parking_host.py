"""The sandbox the parking tests share (tests/system/test_park.py and test_park_wakes.py, a sandbox each)
and their helpers: its profiles (faults of every kind, three that pin 1 MiB of weights each in a 2.5 MiB
park budget) and what the tests ask of it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from daemon.core.command import k25_command
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from k25_sandbox.rendered import rendered_profile, write_engine_shims
from tests.sandboxing import Api, inside

BASELINE_UNIT = "vllm-kimi-k25-int4.service"
COLD_LOAD_S = 8.0
SPEC = {"k": 3, "acceptance": 0.5}
MIB = 1024**2
CYCLES = 20
SUBTLE_FAULTS = (
    "wake-drifts",
    "wake-corrupts-shard",
    "stale-prefix-cache",
    "wake-then-fails",
    "wake-loses-lora",
)
LORA = ("--enable-lora", "--lora-modules", "sql=/srv/lora/sql")  # one adapter, with its known answer


@contextlib.contextmanager
def park_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """A sandbox of its own with the parking tests' profiles (tests/system/test_park.py, test_park_wakes.py)."""
    extra, models = tmp_path_factory.mktemp("park-profiles"), tmp_path_factory.mktemp("park-models")
    make_models(models)

    def write(name: str, **kw: Any) -> None:
        kw.setdefault("flavor", "vllm")
        kw.setdefault("load_seconds", 1.0)
        (extra / f"{name}.toml").write_text(fake_engine_profile(name, port=free_port(), models=models, **kw))

    # The default profile parks: an 8 s cold start, a wake at 100 GB/s (68 GiB of fake weights: 0.7 s).
    write("baseline", unit=BASELINE_UNIT, load_seconds=COLD_LOAD_S, park="sleep", wake_gbps=100.0)
    write("keeps", park="sleep", faults=("sleep-keeps-memory",))
    write("wakefail", park="sleep", faults=("wake-fails",))
    write("speczero", park="sleep", spec=SPEC, faults=("wake-zero-acceptance",))
    write("bigger", settings={"memory_fraction": "1.0"})  # needs every MiB of each GPU
    # The known answer (a wake is proven by the tokens, not by liveness).
    # Rendered (no `command`): k25-ctl's own argv for SGLang, answered by the fake engine through a shim.
    shims = write_engine_shims(tmp_path_factory.mktemp("park-shims"))
    sgpark = rendered_profile(
        "sgpark",
        flavor="sglang",
        port=free_port(),
        model=models / "Kimi-K2.5-INT4",
        shims=shims,
        fake_args=("--load-seconds", "1"),
        park="release",
    )
    (extra / "sgpark.toml").write_text(sgpark)
    write("sgnobackup", flavor="sglang", park="release", park_flags=("--enable-memory-saver",))
    write("level2", park="sleep", settings={"park_level": "2"})
    write("norpc", park="sleep", settings={"park_level": "2"}, faults=("no-collective-rpc",))
    write("corrupt", park="sleep", faults=("wake-corrupts",))
    # What only the fingerprint shows (issue 52): each ends in a stop and a cold start.
    for fault in SUBTLE_FAULTS:
        write(f"fp-{fault}", park="sleep", faults=(fault,), engine_args=("--logprob-noise", "0.004", *LORA),
              settings={"lora_adapters": '{sql = "/srv/lora/sql"}'})  # fmt: skip
    # 20 park-and-wake cycles in a row (issue 52): the weights drift from the 20th wake on; a quick
    # profile that does not park is where each cycle goes away to.
    fast = ("--logprob-noise", "0.004")
    write(
        "fp-cycles",
        park="sleep",
        rate=2000.0,
        wake_gbps=1000.0,
        faults=("drifts-after-cycles",),
        fault_after=CYCLES,
        engine_args=fast,
    )
    write("quick", rate=2000.0, load_seconds=0.2)
    # Three that pin 1 MiB of weights each when parked, in a budget of 2.5 MiB: two fit, a third evicts.
    for name in ("pa", "pb", "pc"):
        weights = models / f"weights-{name}"
        weights.mkdir()
        (weights / "model-00001-of-00001.safetensors").write_bytes(b"\1" * MIB)
        write(name, park="sleep", weights=weights)
    # Two on the same weight files, each parking at level "auto" (issue 51).
    shared = models / "weights-shared"
    shared.mkdir()
    (shared / "model-00001-of-00001.safetensors").write_bytes(b"\2" * MIB)
    for name in ("aa", "ab"):
        write(name, park="sleep", weights=shared, settings={"park_level": '"auto"'})
    budget = {"park_ram_budget_bytes": str(int(2.5 * MIB))}
    info = sbx.up(profiles=extra, load_seconds=1.0, binds=(models,), settings=budget)
    try:
        yield Api(info)
    finally:
        sbx.down(info)


def main_pid(api: Api, unit: str) -> int:
    return int(inside(api.info, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip())


def cli(host: Api, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"K25_CONFIG": host.info.config, "PATH": "/usr/bin:/bin"}
    return subprocess.run([*k25_command(), *args], capture_output=True, text=True, timeout=120, env=env)


def details(run: Any, phase: str | None = None) -> list[str]:
    return [e["detail"] for e in run["events"] if phase is None or e["phase"] == phase]


def at(e: Any) -> datetime:
    return datetime.fromisoformat(e["at"])


def ready_s(run: Any, first: str) -> float:
    """From the bring-up's first event (`start` or `waking`) to the run's end: the engine's ready time."""
    began = next(at(e) for e in run["events"] if e["phase"] == first)
    return (datetime.fromisoformat(run["ended_at"]) - began).total_seconds()


def switch(api: Api, name: str, *, force: bool = False) -> Any:
    """Activate `name` (already active: nothing to do, no cold start a test does not need)."""
    run = api.activate(name, force=force)
    assert run.get("outcome") == "active" or run.get("detail") == "already active", run
    return run


def parked_profiles(api: Api) -> dict[str, Any]:
    return {p["profile"]: p for p in api.status()["parked"]}


def unpark_all(api: Api) -> None:
    """A test's start: a profile that does not park serves, and whatever an earlier test left parked is
    stopped."""
    switch(api, "vllm-eagle3")
    for name in parked_profiles(api):
        assert api.client.post(f"/profiles/{name}/unpark").status_code == 200


def restart(host: Api) -> None:
    old = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert inside(host.info, "systemctl", "restart", "k25-ctl.service").returncode == 0
    host.wait_until(
        lambda: (
            inside(
                host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service"
            ).stdout.strip()
            not in ("0", old)
            and host.client.get("/healthz").status_code == 200
        ),
        what="daemon restarted",
    )


def park_and_wake(host: Api, name: str) -> tuple[int, Any]:
    """`name` cold, parked by a switch away, then activated again: its first main PID and the last run."""
    unpark_all(host)
    switch(host, name)
    pid = main_pid(host, f"k25-engine@{name}.service")
    switch(host, "vllm-eagle3")
    assert name in parked_profiles(host)
    return pid, switch(host, name)


def journal(host: Api, unit: str) -> list[str]:
    out = inside(host.info, "journalctl", "-u", unit, "-o", "cat", "--no-pager").stdout
    return out.splitlines()


def cold_or_woken(api: Api, run_id: int) -> str:
    stages = api.run(run_id)["load_stages"] or {}
    return "woken" if "wake" in stages else "cold"
