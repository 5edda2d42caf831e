"""Every route: status codes, auth, busy, unknown, bad input, no-op (httpx ASGI transport, real SQLite)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.core.errors import K25Error
from daemon.host.gpu import GpuInfo, NoGpus
from daemon.startup.app import create_app
from daemon.startup.machine import HostPorts
from tests.api.conftest import Env, make_settings, wait_run
from tests.api.fakes import BrokenNvml, FakeJournal, FakeProber, FakeSystemd, fake_teardown
from tests.waiting import eventually


async def test_reads(env: Env) -> None:
    c = env.client
    assert (await c.get("/healthz")).json() == {"status": "ok"}
    st = (await c.get("/status")).json()
    assert st["state"] == "idle"
    assert st["gpus"] == []
    profiles = (await c.get("/profiles")).json()
    names = {p["name"]: p for p in profiles}
    assert names["baseline"]["default"] is True
    assert names["alpha"]["argv"][:2] == ["vllm", "serve"]
    assert names["broken"]["valid"] is False
    assert "'model'" in names["broken"]["error"]
    assert (await c.get("/profiles/alpha")).json()["unit"] == "k25-engine@alpha.service"
    assert (await c.get("/profiles/nope")).status_code == 404
    assert (await c.get("/runs")).json() == []
    assert (await c.get("/runs/999")).status_code == 404
    assert (await c.get("/teardown/plan")).json()["victims"] == []
    assert "text/html" in (await c.get("/")).headers["content-type"]
    assert (await c.get("/docs")).status_code == 200


async def test_bad_input_is_422_and_413(env: Env) -> None:
    c = env.client
    assert (await c.get("/runs", params={"limit": 0})).status_code == 422
    assert (await c.get("/runs", params={"limit": "many"})).status_code == 422
    assert (await c.get("/runs/abc")).status_code == 422
    r = await c.post("/profiles/alpha/activate", params={"force": "perhaps"}, headers=env.auth)
    assert r.status_code == 422
    big = await c.post("/profiles/alpha/activate", content=b"x" * 70_000, headers=env.auth)
    assert big.status_code == 413
    assert "detail" in big.json()


async def test_writes_need_the_token(env: Env) -> None:
    c = env.client
    for path in ("/profiles/alpha/activate", "/restore", "/runs/1/cancel", "/teardown"):
        r = await c.post(path)
        assert r.status_code == 401, path
        assert "bearer token" in r.json()["detail"]
    assert (await c.post("/restore", headers={"Authorization": "Bearer wrong"})).status_code == 401
    assert (await c.post("/profiles/alpha/activate", headers={"Authorization": "Basic x"})).status_code == 401


async def test_activate_202_location_then_noop(env: Env) -> None:
    c = env.client
    r = await c.post("/profiles/alpha/activate", headers=env.auth)
    assert r.status_code == 202
    run_id = r.json()["run_id"]
    assert r.headers["location"] == f"/runs/{run_id}"
    run = await wait_run(env, run_id)
    assert run["outcome"] == "active"
    progress = [e["detail"] for e in run["events"] if e["phase"] == "loading" and "%" in e["detail"]]
    assert progress == ["0% (0/4)", "25% (1/4)", "50% (2/4)", "75% (3/4)", "100% (4/4)"]
    again = await c.post("/profiles/alpha/activate", headers=env.auth)
    assert (again.status_code, again.json()["run_id"]) == (200, None)
    forced = await c.post("/profiles/alpha/activate", params={"force": True, "wait": True}, headers=env.auth)
    assert forced.status_code == 200
    assert forced.json()["outcome"] == "active"
    assert (await c.post("/profiles/nope/activate", headers=env.auth)).status_code == 404
    st = (await c.get("/status")).json()
    assert (st["state"], st["active_profile"]) == ("active", "alpha")


async def test_busy_is_409_naming_the_run_and_cancel(env: Env) -> None:
    c = env.client
    env.prober.gate.clear()  # the switch stays in probing
    run_id = (await c.post("/profiles/beta/activate", headers=env.auth)).json()["run_id"]
    busy = await c.post("/profiles/alpha/activate", headers=env.auth)
    assert busy.status_code == 409
    assert f"run {run_id}" in busy.json()["detail"]
    assert (await c.post("/teardown", headers=env.auth)).status_code == 409
    # A run that does not exist is 404, as GET /runs/ID answers (issue 49: it was 409 "not in progress").
    for missing in (999999, 9223372036854775807):
        gone = await c.post(f"/runs/{missing}/cancel", headers=env.auth)
        assert (gone.status_code, gone.json()["detail"]) == (404, f"no run {missing}")
        assert (await c.get(f"/runs/{missing}")).status_code == 404
    r = await c.post(f"/runs/{run_id}/cancel", headers=env.auth)
    assert r.status_code == 202
    run = await wait_run(env, run_id)
    assert run["outcome"] == "cancelled"
    ended = await c.post(f"/runs/{run_id}/cancel", headers=env.auth)  # a run that ended: 409, not 404
    assert (ended.status_code, ended.json()["detail"]) == (409, f"run {run_id} is not in progress")
    env.prober.gate.set()


async def test_failure_rolls_back_to_the_default(env: Env) -> None:
    c = env.client
    env.systemd.crash.add("k25-engine@beta.service")
    run = (await c.post("/profiles/beta/activate", params={"wait": True}, headers=env.auth)).json()
    assert run["outcome"] == "failed"
    assert "CUDA out of memory" in run["error"]

    async def settled() -> Any:
        st = (await c.get("/status")).json()
        return st if st["state"] != "switching" else None

    st = await eventually(settled, what="the host leaves switching")
    assert (st["state"], st["active_profile"]) == ("active", "baseline")
    runs = (await c.get("/runs")).json()
    switches = [(r["kind"], r["parent_id"]) for r in runs if r["kind"] != "serving"]
    assert switches[:1] == [("rollback", run["id"])]
    assert (await c.get("/runs", params={"profile": "beta"})).json()[0]["id"] == run["id"]


async def test_restore_run_events_sse_and_metrics(env: Env) -> None:
    c = env.client
    r = await c.post("/restore", headers=env.auth)
    assert r.status_code == 202
    run_id = r.json()["run_id"]
    sse = await c.get(f"/runs/{run_id}/events")  # ends with the run
    assert sse.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:]) for line in sse.text.splitlines() if line.startswith("data:")]
    assert events[-1]["phase"] == "active"
    assert "event: loading" in sse.text
    assert (await c.get("/runs/999/events")).status_code == 404
    text = (await c.get("/metrics")).text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert {"k25_host_state", "k25_active_profile", "k25_runs_total", "k25_load_seconds"} <= names


async def test_maintenance_teardown_when_idle(env: Env) -> None:
    r = await env.client.post("/teardown", headers=env.auth)
    assert r.status_code == 200
    assert r.json()["report"]["ok"] is True  # gpu_backend "none": no GPUs are expected here


async def test_maintenance_teardown_fails_where_gpus_cannot_be_read(tmp_path: Path) -> None:
    """With NVML expected but failing, the teardown must say so, never "GPUs clean" over an empty list."""
    settings = make_settings(tmp_path)
    journal = FakeJournal()
    systemd = FakeSystemd(journal, set())
    ports = HostPorts(systemd=systemd, journal=journal, gpus=BrokenNvml(), teardown=fake_teardown(BrokenNvml()),
                      prober=FakeProber(systemd))  # fmt: skip
    app = create_app(settings, lambda _: ports)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://k25") as c:
            r = await c.post("/teardown", headers={"Authorization": "Bearer s3cret-token"})
            assert r.status_code == 200
            report = r.json()["report"]
            assert report["ok"] is False
            assert "cannot verify the GPUs: NVML failed" in report["error"]
            run = (await c.get(f"/runs/{r.json()['run_id']}")).json()
            assert (run["outcome"], run["phase"]) == ("failed", "failed")
            st = (await c.get("/status")).json()
            assert st["gpus"] == []
            assert "NVML failed" in st["gpu_error"]
            metrics = (await c.get("/metrics")).text
            assert "k25_gpu_readable 0.0" in metrics


async def test_reads_can_require_the_token(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, reads_require_token=True)
    journal = FakeJournal()
    systemd = FakeSystemd(journal, set())
    ports = HostPorts(systemd=systemd, journal=journal, gpus=NoGpus(), teardown=fake_teardown(),
                      prober=FakeProber(systemd))  # fmt: skip
    app = create_app(settings, lambda _: ports)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://k25") as c:
            assert (await c.get("/status")).status_code == 401
            assert (
                await c.get("/status", headers={"Authorization": "Bearer s3cret-token"})
            ).status_code == 200
            assert (await c.get("/healthz")).status_code == 200


@pytest.mark.parametrize("mode", [None, 0o644])
async def test_token_file_missing_or_open_is_a_startup_error(tmp_path: Path, mode: int | None) -> None:
    settings = make_settings(tmp_path)
    if mode is None:
        (tmp_path / "token").unlink()
    else:
        (tmp_path / "token").chmod(mode)
    app = create_app(settings, lambda _: pytest.fail("ports must not be built"))
    with pytest.raises(K25Error, match="token file"):
        async with app.router.lifespan_context(app):
            pass


async def test_two_requests_at_once_start_one_switch(env: Env) -> None:
    env.prober.gate.clear()
    a, b = await asyncio.gather(
        env.client.post("/profiles/alpha/activate", headers=env.auth),
        env.client.post("/profiles/beta/activate", headers=env.auth),
    )
    assert sorted((a.status_code, b.status_code)) == [202, 409]
    env.prober.gate.set()
    accepted = a if a.status_code == 202 else b
    assert (await wait_run(env, accepted.json()["run_id"]))["outcome"] == "active"
    assert [r["kind"] for r in (await env.client.get("/runs")).json()] == ["serving", "switch"]


class GatedGpus:
    """A GPU view whose reads wait (in the teardown's thread) until the test opens the gate: a teardown
    that takes its time, as one that SIGTERMs and waits for an engine does."""

    required = False

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        if not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(timeout=30)
        return []

    def driver_version(self) -> str | None:
        return None


async def test_a_maintenance_teardown_is_a_job_a_switch_must_wait_for(tmp_path: Path) -> None:
    """An activate while POST /teardown kills and verifies gets 409 naming the teardown (it used to start
    an engine the teardown was about to kill); /status shows the teardown as the job that runs."""
    gpus = GatedGpus()
    settings = make_settings(tmp_path)
    journal = FakeJournal()
    systemd = FakeSystemd(journal, {"k25-engine@alpha.service"})
    ports = HostPorts(
        systemd=systemd, journal=journal, gpus=gpus, teardown=fake_teardown(gpus), prober=FakeProber(systemd)
    )
    app = create_app(settings, lambda _: ports)
    auth = {"Authorization": "Bearer s3cret-token"}
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://k25") as c:
            gpus.gate.clear()
            teardown = asyncio.create_task(c.post("/teardown", headers=auth))
            await asyncio.to_thread(gpus.waiting.wait, 10)  # the teardown reads the GPUs
            r = await c.post("/profiles/alpha/activate", headers=auth)
            assert r.status_code == 409, r.text
            assert "(maintenance teardown) is in progress" in r.json()["detail"]
            st = (await c.get("/status")).json()
            assert "teardown run " in (st["job"] or ""), st
            assert (await c.post("/teardown", headers=auth)).status_code == 409  # one at a time too
            gpus.gate.set()
            done = await teardown
            assert done.status_code == 200, done.text
            assert systemd.states.get("k25-engine@alpha.service") is None  # nothing was started meanwhile
            r = await c.post("/profiles/alpha/activate", headers=auth)
            assert r.status_code == 202, r.text


async def test_the_worker_threads_are_started_before_the_first_request(env: Env) -> None:
    """A to_thread never starts a thread from the event loop (Thread.start waits there for the OS to
    schedule it: 101 ms seen on a busy CI machine, in the middle of a request)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    executor = asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]
    assert isinstance(executor, ThreadPoolExecutor)
    assert len(executor._threads) == executor._max_workers
    await asyncio.gather(*(asyncio.to_thread(sum, [1, 2]) for _ in range(3 * executor._max_workers)))
    assert len(executor._threads) == executor._max_workers


async def test_every_route_is_built_before_the_first_request(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FastAPI builds an included router's routes at the first request that reaches them, on the event loop
    (100 ms and more: the API guard caught it on busy CI runs, in inspect.signature and pydantic's schema
    generation). The daemon builds them all before it serves: no first request of any router builds one."""
    from fastapi.dependencies import utils

    built: list[object] = []
    real = utils.get_typed_signature

    def spy(call: Any) -> Any:
        built.append(call)
        return real(call)

    monkeypatch.setattr(utils, "get_typed_signature", spy)
    for path in (
        "/status",
        "/profiles",
        "/runs",
        "/compare",
        "/capture",
        "/datasets",
        "/healthz",
        "/metrics",
    ):
        assert (await env.client.get(path)).status_code < 500, path
    assert (await env.client.get("/teardown/plan")).status_code < 500
    assert built == []
