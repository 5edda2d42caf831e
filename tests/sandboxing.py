"""Helpers for tests against the sandbox (system and web tests): fault profiles, running commands and
probe scenarios inside it, and its REST API."""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from k25_sandbox import sandbox as sbx
from k25_sandbox.faults import FAULT_PROFILES, WEIGHT_FILE_MIB, inside, write_fault_profiles
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.waiting import eventually_sync

__all__ = ["FAULT_PROFILES", "WEIGHT_FILE_MIB", "inside", "write_fault_profiles"]

ROW_S = 15.0  # the session sandbox's metrics_row_s (a daemon's default is 60 s)


def daemon_pid(info: sbx.SandboxInfo) -> str:
    return inside(info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()


def kill_daemon(api: Api, info: sbx.SandboxInfo) -> None:
    """SIGKILL to the daemon (its engine units run on), then until systemd has started a new one that
    answers."""
    old = daemon_pid(info)
    assert inside(info, "systemctl", "kill", "-s", "KILL", "k25-ctl.service").returncode == 0
    api.wait_until(lambda: daemon_pid(info) not in ("0", old) and api.client.get("/healthz").status_code == 200,
                   within_s=60, what="daemon restarted")  # fmt: skip


class Api:
    """The daemon's REST API in a sandbox, with its token."""

    def __init__(self, info: sbx.SandboxInfo) -> None:
        import httpx

        self.info = info
        self.client = httpx.Client(
            base_url=info.url, timeout=120, headers={"Authorization": f"Bearer {info.token}"}
        )

    def activate(
        self, name: str, *, wait: bool = True, force: bool = False, expect: str | None = "active"
    ) -> Any:
        """Activate `name`. With `wait`, the ended run (or "already active"), whose outcome must be `expect`
        (None: any): a precondition that did not hold fails here, with the run's error, not later."""
        r = self.client.post(f"/profiles/{name}/activate", params={"wait": wait, "force": force})
        assert r.status_code in (200, 202), r.text
        answer = r.json()
        if wait and expect is not None and answer.get("detail") != "already active":
            assert answer.get("outcome") == expect, (
                f"activate {name}: {answer.get('outcome')}, not {expect}: {answer}"
            )
        return answer

    def run(self, run_id: int) -> Any:
        return self.client.get(f"/runs/{run_id}").json()

    def status(self) -> Any:
        return self.client.get("/status").json()

    def wait_run(self, run_id: int, *, within_s: float = 120) -> Any:
        """Until the run has ended: its event stream (GET /runs/ID/events) is followed until it closes, which
        it does after the run's final event, then the run is read once. A stream that breaks off (a daemon
        that restarts, no stream free) or stays silent for 10 s (an end whose write the daemon holds, as on a
        full disk, comes after its event) is opened again, no sooner than `every_s` after the last."""
        import httpx

        deadline, every_s = time.monotonic() + within_s, 0.2
        while True:
            opened = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                run = self.run(run_id)
                if run["outcome"] != "running":
                    return run
                silent_s = min(max(deadline - time.monotonic(), 0.1), 10.0)
                with self.client.stream("GET", f"/runs/{run_id}/events", timeout=silent_s) as events:
                    for _ in events.iter_bytes():
                        if time.monotonic() >= deadline:
                            break
            if time.monotonic() >= deadline:
                raise AssertionError(f"run {run_id} ends: not within {within_s}s")
            time.sleep(max(0.0, opened + every_s - time.monotonic()))

    def stream_rate(self, run_ids: list[int]) -> float:
        """The median over these benchmarks' requests of output tokens over the request's own time (sent
        to last token): the engine's pace. A stall of this busy machine (a real vLLM starting on another
        worker) slows one request, or the gap between two (which a throughput counts); the median of the
        requests does not see it."""
        rates: list[float] = []
        for run_id in run_ids:
            bench = self.client.get(f"/benchmarks/{run_id}", params={"requests": True}).json()
            rates += [r["out"] / r["e2el"] for r in bench["levels"][0]["requests"] if r["status"] == "ok"]
        assert rates, run_ids
        return statistics.median(rates)

    def wait_until(self, predicate: Any, *, within_s: float = 60, what: str = "condition") -> Any:
        # The daemon may be restarting: any error counts as "not yet".
        return eventually_sync(predicate, what=what, within_s=within_s, tolerate=(Exception,))

    def profiles_checked(self, *, within_s: float = 240) -> dict[str, Any]:
        """GET /profiles once the daemon has asked every installed engine for its flags (a start reads its
        cache only, and asks the rest in the background), by name."""

        def asked() -> dict[str, Any] | None:
            items = {p["name"]: p for p in self.client.get("/profiles").json()}
            notes = [n for p in items.values() for n in p.get("engine_notes") or []]
            return None if any("flags not read yet" in n for n in notes) else items

        found: dict[str, Any] = self.wait_until(asked, within_s=within_s, what="the engines asked")
        return found


def probe(info: sbx.SandboxInfo, scenario: str, *args: str) -> Any:
    """Run a tests/system/probe.py scenario inside the sandbox and return its JSON result."""
    r = inside(info, sys.executable, "-m", "tests.system.probe", scenario, *args)
    assert r.returncode == 0, f"probe {scenario} failed:\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def stop_engines(info: sbx.SandboxInfo) -> None:
    """Stop every engine unit behind the daemon's back: for tests that drive units directly."""
    r = inside(info, "systemctl", "stop", "k25-engine@*.service", "vllm-kimi-k25-int4.service")
    assert r.returncode == 0, r.stderr
    inside(info, "systemctl", "reset-failed")


@contextlib.contextmanager
def with_profiles(folder: Path, profiles: dict[str, dict[str, Any]]) -> Iterator[Api]:
    """A sandbox with these fake-engine profiles beside the stock ones (name -> fake_engine_profile's
    keywords: flavor, rate, spec, engine_args...), each loading in half a second; down at the end."""
    models = folder / "models"
    make_models(models)
    for name, kw in profiles.items():
        text = fake_engine_profile(name, port=free_port(), models=models, load_seconds=0.5, **kw)
        (folder / f"{name}.toml").write_text(text)
    info = sbx.up(load_seconds=0.5, profiles=folder, binds=(models,))
    try:
        yield Api(info)
    finally:
        sbx.down(info)
