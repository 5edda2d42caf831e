"""Switches that clients do not feel, through the app with fake host ports: /ready for load balancers, the
drain before a stop (the engine's own gauges), what each switch cost, cancel while draining."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from tests.api.conftest import Env, running_env, wait_run
from tests.waiting import eventually

METRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="m",engine="0"}} {waiting}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{model_name="m",engine="0",finished_reason="stop"}} {done}
"""


def _load(running: int, waiting: int = 0, done: int = 0) -> str:
    return METRICS.format(running=running, waiting=waiting, done=done)


async def _activate(env: Env, name: str, **params: Any) -> Any:
    r = await env.client.post(f"/profiles/{name}/activate", params={"wait": True} | params, headers=env.auth)
    return r.json()


async def test_ready_follows_the_host(env: Env) -> None:
    c = env.client
    idle = await c.get("/ready")
    assert (idle.status_code, idle.json()["reason"]) == (503, "idle")
    assert (await c.head("/ready")).status_code == 503
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    ok = await c.get("/ready")
    assert ok.status_code == 200
    assert ok.json() == {"ready": True, "profile": "baseline", "port": 9100, "reason": None}
    head = await c.head("/ready")
    assert (head.status_code, head.content) == (200, b"")
    assert (await c.get("/ready", params={"port": 9100})).status_code == 200
    other = await c.get("/ready", params={"port": 9101})
    assert other.status_code == 503
    assert "port 9101 is not served (active: baseline on 9100)" in other.json()["reason"]
    assert (await c.get("/ready", params={"port": 0})).status_code == 422
    assert (await c.get("/ready", headers={"Authorization": "Bearer wrong"})).status_code == 200  # no token


async def test_a_switch_drains_first_and_records_what_it_cost(tmp_path: Path) -> None:
    async with running_env(tmp_path, watch_interval_s=60.0) as env:  # the drain alone reads the script
        await _drains_and_records(env)


async def _drains_and_records(env: Env) -> None:
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    steps = [_load(2, 1, 10), _load(1, 0, 12), _load(0, 0, 13)]
    env.prober.scripted["baseline"] = collections.deque(steps)
    run = await _activate(env, "alpha")
    assert run["outcome"] == "active", run
    details = [e["detail"] for e in run["events"] if e["phase"] == "draining"]
    assert details[0].startswith("out of rotation")
    assert "draining: 2 running, 1 waiting" in details
    assert details[-1].startswith("drained after")
    cost = run["switch_cost"]
    assert (cost["drain_finished"], cost["drain_cut"], cost["drain_timed_out"]) == (3, 0, False)
    assert cost["downtime_s"] is not None
    assert cost["downtime_s"] > 0
    assert cost["ready_down_at"] < cost["ready_up_at"]
    # The engine was stopped only after the drain: no "stop" event before the last draining one.
    phases = [e["phase"] for e in run["events"]]
    assert phases.index("stop") > max(i for i, p in enumerate(phases) if p == "draining")
    text = (await env.client.get("/metrics")).text
    assert "k25_switch_downtime_seconds_count 1.0" in text
    assert "k25_drain_cut_requests_total 0.0" in text
    assert (await env.client.get("/ready")).json()["profile"] == "alpha"


async def test_cancel_while_draining_leaves_the_engine_serving(env: Env) -> None:
    c = env.client
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    serving = (await c.get("/status")).json()["serving_run_id"]
    env.prober.metrics["baseline"] = _load(3)  # never drains
    run_id = (await c.post("/profiles/alpha/activate", headers=env.auth)).json()["run_id"]

    async def draining() -> Any:
        r = await c.get("/ready")
        return r.json() if r.json()["reason"] == "draining" else None

    assert (await eventually(draining, what="the host drains"))["ready"] is False

    async def counted() -> Any:
        st = (await c.get("/status")).json()
        return st if st["phase_detail"] == "3 running, 0 waiting" else None

    st = await eventually(counted, what="the drain's counts in /status")
    assert (st["state"], st["phase"]) == ("switching", "draining")
    assert (await c.post(f"/runs/{run_id}/cancel", headers=env.auth)).status_code == 202
    run = await wait_run(env, run_id)
    assert run["outcome"] == "cancelled"
    assert "nothing was stopped" in run["events"][-1]["detail"]
    assert "stop" not in [e["phase"] for e in run["events"]]
    st = (await c.get("/status")).json()
    assert (st["state"], st["active_profile"], st["serving_run_id"]) == ("active", "baseline", serving)
    assert env.systemd.states["k25-engine@baseline.service"].active_state == "active"
    assert "k25-engine@alpha.service" not in env.systemd.states  # never started
    assert (await c.get("/ready")).status_code == 200
    assert (await c.get(f"/runs/{run_id}")).json()["switch_cost"]["downtime_s"] > 0  # the drain, as seen


async def test_cancel_while_a_forced_switch_counts_the_cut_leaves_the_engine_serving(env: Env) -> None:
    """A forced switch does not drain: it counts what its stop will cut, reading the serving engine's
    metrics, which a hung engine answers late. A cancel then (the simulation's seed 2026, step 613) once
    left the run unended and the host switching for good."""
    c = env.client
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    serving = (await c.get("/status")).json()["serving_run_id"]
    env.prober.scrapes.clear()  # the engine's /metrics hangs
    run_id = (await c.post("/profiles/alpha/activate", params={"force": True}, headers=env.auth)).json()[
        "run_id"
    ]

    async def cancelled() -> bool:  # a switch whose task has not begun refuses: "cancel again in a moment"
        r = await c.post(f"/runs/{run_id}/cancel", headers=env.auth)
        assert r.status_code in (202, 409), r.text
        return r.status_code == 202

    await eventually(cancelled, what="the cancel taken")
    run = await wait_run(env, run_id)
    env.prober.scrapes.set()
    assert run["outcome"] == "cancelled"
    assert "nothing was stopped" in run["events"][-1]["detail"]
    st = (await c.get("/status")).json()
    assert (st["state"], st["active_profile"], st["serving_run_id"]) == ("active", "baseline", serving)
    assert env.systemd.states["k25-engine@baseline.service"].active_state == "active"
    assert "k25-engine@alpha.service" not in env.systemd.states  # never started


async def test_a_drain_that_times_out_cuts_and_switches(tmp_path: Path) -> None:
    async with running_env(tmp_path, drain_timeout_s=0.2) as env:
        assert (await _activate(env, "baseline"))["outcome"] == "active"
        env.prober.metrics["baseline"] = _load(1)  # a request that never ends
        run = await _activate(env, "alpha")
        assert run["outcome"] == "active", run
        cost = run["switch_cost"]
        assert (cost["drain_timed_out"], cost["drain_cut"]) == (True, 1)
        assert "timed out with 1 request(s) left" in "".join(e["detail"] for e in run["events"])
        assert "k25_drain_cut_requests_total 1.0" in (await env.client.get("/metrics")).text


async def test_no_drain_stops_at_once_and_counts_what_it_cut(env: Env) -> None:
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    env.prober.metrics["baseline"] = _load(2, 1)
    run = await _activate(env, "alpha", drain=False)
    assert run["outcome"] == "active", run
    assert "draining" not in [e["phase"] for e in run["events"]]
    cost = run["switch_cost"]
    assert (cost["drain_s"], cost["drain_cut"]) == (None, 3)
    assert cost["downtime_s"] is not None


async def test_a_switch_from_idle_has_no_drain_and_no_downtime(env: Env) -> None:
    run = await _activate(env, "alpha")
    assert run["outcome"] == "active"
    assert run["switch_cost"] is None


async def test_a_profile_with_drain_false_is_stopped_at_once(env: Env) -> None:
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    path = env.settings.profiles_path / "baseline.toml"
    path.write_text(path.read_text() + "drain = false\n")  # read afresh by the next switch
    assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200
    assert (await _activate(env, "baseline", force=True))["outcome"] == "active"  # serves the new file
    env.prober.metrics["baseline"] = _load(1)
    run = await _activate(env, "alpha")
    assert "draining" not in [e["phase"] for e in run["events"]]
    assert (run["switch_cost"]["drain_s"], run["switch_cost"]["drain_cut"]) == (None, 1)


async def test_an_isolated_benchmark_takes_the_host_out_of_rotation(env: Env) -> None:
    c = env.client
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    spec = {"concurrency": [1], "num_prompts": 2, "max_tokens": 3000, "warmups": 0}  # ~1.2 s at 5000 tok/s
    run_id = (await c.post("/benchmarks", params={"isolate": True}, json=spec, headers=env.auth)).json()[
        "run_id"
    ]

    async def out() -> Any:
        r = await c.get("/ready")
        return r.json() if r.status_code == 503 else None

    assert (await eventually(out, what="out of rotation"))["reason"] == f"benchmark {run_id}"
    assert (await wait_run(env, run_id))["outcome"] == "ok"
    assert (await c.get("/ready")).status_code == 200
    plain = (await c.post("/benchmarks", json=spec, headers=env.auth)).json()["run_id"]
    assert (await c.get("/ready")).status_code == 200  # a plain benchmark keeps the host in rotation
    await wait_run(env, plain)
