"""What the fleet layer (contrib/ansible) asks of one host: a switch's plan that touches nothing (Ansible's
check mode, through POST /plans) and each benchmark against the host's own normal (the gate of a rollout,
and k25_host_relative_throughput for the slow-host alert)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import Env, running_env, wait_run
from tests.api.test_park import _activate, _parkable_baseline

SPEC = {"concurrency": [1], "num_prompts": 2, "max_tokens": 8, "warmups": 0}


async def _plan(env: Env, body: dict[str, Any], status: int = 200) -> Any:
    r = await env.client.post("/plans", json=body, headers=env.auth)
    assert r.status_code == status, r.text
    return r.json()


async def test_a_switch_plan_says_what_an_activate_would_do_and_does_nothing(env: Env) -> None:
    first = await _plan(env, {"activate": "baseline"})
    assert (first["switch"], first["from_profile"], first["state"]) == (True, None, "idle")
    assert (first["start"], first["away"], first["refused"], first["estimate_s"]) == (
        "cold start", None, None, None,
    )  # fmt: skip
    assert (await env.client.get("/runs")).json() == []  # a plan records nothing
    assert (await env.client.get("/status")).json()["state"] == "idle"

    await _activate(env, "baseline")
    same = await _plan(env, {"activate": "baseline"})
    assert (same["switch"], same["reason"]) == (False, "baseline is already active and healthy")
    assert (await _plan(env, {"activate": "baseline", "force": True}))["switch"] is True
    other = await _plan(env, {"activate": "alpha"})
    assert (other["switch"], other["from_profile"], other["away"], other["start"]) == (
        True, "baseline", "drain, then stop", "cold start",
    )  # fmt: skip
    assert other["estimate_s"] is None  # alpha never started: nothing to estimate from
    assert (await _plan(env, {"activate": "alpha", "drain": False}))["away"] == "stop"
    runs = len((await env.client.get("/runs")).json())
    await _activate(env, "alpha")
    back = await _plan(env, {"activate": "baseline"})
    assert back["estimate_s"] is not None
    assert back["estimate_s"] > 0
    assert len((await env.client.get("/runs")).json()) == runs + 2  # the switch and its serving run

    # Bad input: a clear answer, nothing started.
    assert "no valid profile 'nope'" in (await _plan(env, {"activate": "nope"}, 404))["detail"]
    assert "bogus" in str(await _plan(env, {"activate": "alpha", "bogus": 1}, 422))
    assert (await env.client.post("/plans", json={"activate": "alpha"})).status_code == 401
    assert (await env.client.get("/status")).json()["active_profile"] == "alpha"


async def test_a_plan_says_a_parked_profile_wakes_and_a_busy_host_refuses(tmp_path: Path) -> None:
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        await _parkable_baseline(env, tmp_path)
        env.prober.json_answers[("baseline", "/is_sleeping")] = {"is_sleeping": True}
        away = await _plan(env, {"activate": "alpha"})
        assert away["away"] == "drain, then park"  # the serving baseline parks
        await _activate(env, "alpha")
        back = await _plan(env, {"activate": "baseline"})
        assert (back["start"], back["switch"]) == ("wake", True)
        slow = SPEC | {"num_prompts": 50, "max_tokens": 64}
        r = await env.client.post("/benchmarks", json=slow, headers=env.auth)
        assert r.status_code == 202, r.text
        busy = await _plan(env, {"activate": "baseline"})
        assert busy["switch"] is False
        assert busy["refused"] is not None, busy
        assert "benchmark" in busy["refused"], busy
        assert (
            await env.client.post(f"/runs/{r.json()['run_id']}/cancel", headers=env.auth)
        ).status_code == 202
        await wait_run(env, r.json()["run_id"])


async def test_each_benchmark_is_held_to_the_hosts_own_normal(env: Env) -> None:
    await _activate(env, "baseline")
    ids = []
    for spec in (SPEC, SPEC, SPEC, SPEC | {"max_tokens": 9}):
        r = await env.client.post("/benchmarks", json=spec, headers=env.auth)
        assert r.status_code == 202, r.text
        ids.append(r.json()["run_id"])
        assert (await wait_run(env, ids[-1]))["outcome"] == "ok"
    got = [(await env.client.get(f"/benchmarks/{i}")).json() for i in ids]
    assert got[0]["relative"] is None  # the first of its kind: nothing to compare with
    assert got[3]["relative"] is None  # another spec is another measurement
    second, third = got[1]["relative"], got[2]["relative"]
    assert second["baseline_runs"] == 1
    assert abs(second["baseline"] - got[0]["output_throughput"]) < 1e-9
    assert third["baseline_runs"] == 2
    median = (got[0]["output_throughput"] + got[1]["output_throughput"]) / 2
    assert abs(third["baseline"] - median) < 1e-9
    assert abs(third["ratio"] - got[2]["output_throughput"] / median) < 1e-9
    # /metrics: the newest benchmark of the profile (the other spec's, the first of its kind: none), so
    # switch to the spec measured before and measure once more.
    scraped = await env.client.get("/metrics")
    assert scraped.status_code == 200, scraped.text
    assert "k25_host_relative_throughput{" not in scraped.text
    r = await env.client.post("/benchmarks", json=SPEC, headers=env.auth)
    last = await wait_run(env, r.json()["run_id"])
    rel = (await env.client.get(f"/benchmarks/{last['id']}")).json()["relative"]
    assert rel["baseline_runs"] == 3
    metrics = (await env.client.get("/metrics")).text
    found = re.search(r'^k25_host_relative_throughput\{profile="baseline"\} (\S+)$', metrics, re.M)
    assert found is not None, metrics
    assert abs(float(found.group(1)) - rel["ratio"]) < 1e-9


async def test_a_scrape_between_a_benchmarks_save_and_its_end_leaves_no_stale_ratio(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A benchmark is stored before its run ends ok (a reader that waits for the end finds it); a /metrics
    scrape in between computes the ratios without it. The run's end makes them be computed again: the
    gauge is the newest benchmark's, not the one before it until some later benchmark."""
    await _activate(env, "baseline")
    ctl = env.app.state.services.controllers.bench
    save = ctl.bench_store.save
    scraped: list[dict[str, float]] = []

    def save_then_scrape(*args: Any) -> int:
        saved: int = save(*args)
        scraped.append({p: r.ratio for p, r in ctl.relative.newest().items()})  # the run still open
        return saved

    monkeypatch.setattr(ctl.bench_store, "save", save_then_scrape)
    for _ in range(2):
        r = await env.client.post("/benchmarks", json=SPEC, headers=env.auth)
        assert r.status_code == 202, r.text
        assert (await wait_run(env, r.json()["run_id"]))["outcome"] == "ok"
    assert scraped == [{}, {}]  # at the second save, the first benchmark alone: the first of its kind
    rel = (await env.client.get(f"/benchmarks/{r.json()['run_id']}")).json()["relative"]
    metrics = (await env.client.get("/metrics")).text
    found = re.search(r'^k25_host_relative_throughput\{profile="baseline"\} (\S+)$', metrics, re.M)
    assert found is not None, metrics
    assert abs(float(found.group(1)) - rel["ratio"]) < 1e-9


async def test_a_gate_benchmark_is_judged_against_the_normal_and_says_when_there_is_none(env: Env) -> None:
    """Issue 55: the gate is recorded with the benchmark (its spec's gate, outside the spec hash) and judged
    on read; a gate with no normal passes and says why the normal is missing, unless it requires one."""
    await _activate(env, "baseline")

    async def bench(spec: dict[str, object]) -> dict[str, object]:
        r = await env.client.post("/benchmarks", json=spec, headers=env.auth)
        assert r.status_code == 202, r.text
        assert (await wait_run(env, r.json()["run_id"]))["outcome"] == "ok"
        got: dict[str, object] = (await env.client.get(f"/benchmarks/{r.json()['run_id']}")).json()
        return got

    first = await bench(SPEC | {"gate": {"min_relative": 0.9}})
    assert first["gate"] == {
        "min_relative": 0.9,
        "require_normal": False,
        "passed": True,
        "text": "the first benchmark of its kind on this host: nothing to compare with yet (the normal is "
        "per profile, benchmark spec and whether other clients were served while it ran)",
    }
    strict = await bench(SPEC | {"max_tokens": 11, "gate": {"min_relative": 0.9, "require_normal": True}})
    gate = strict["gate"]
    assert isinstance(gate, dict)
    assert gate["passed"] is False
    assert str(gate["text"]).endswith("; the gate requires a normal")
    held = await bench(SPEC | {"gate": {"min_relative": 0.01}})  # the same spec hash as the first
    assert held["spec_hash"] == first["spec_hash"]
    gate = held["gate"]
    assert isinstance(gate, dict)
    assert gate["passed"] is True
    assert "of this host's normal" in str(gate["text"])
    assert held["serving_run_id"] is not None
    plain = await bench(SPEC)
    assert plain["gate"] is None
    assert plain["spec_hash"] == first["spec_hash"]
    impossible = await bench(SPEC | {"gate": {"min_relative": 10.0}})
    gate = impossible["gate"]
    assert isinstance(gate, dict)
    assert gate["passed"] is False
