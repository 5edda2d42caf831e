"""The serving watch over fake units: crashes, the on_failure policies, units changed with systemctl,
conflicts, hangs, and the metric rows of a serving run."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from tests.api.conftest import PROFILE, Env, wait_run
from tests.waiting import eventually

ALPHA, BETA, BASE = "k25-engine@alpha.service", "k25-engine@beta.service", "k25-engine@baseline.service"


async def _until(env: Env, check: Callable[[Any], bool], what: str) -> Any:
    async def status() -> Any:
        st = (await env.client.get("/status")).json()
        return st if check(st) else None

    return await eventually(status, what=what)


async def _runs(env: Env) -> list[Any]:
    runs: list[Any] = (await env.client.get("/runs", params={"limit": 100})).json()
    return runs


async def _activate(env: Env, name: str) -> Any:
    r = await env.client.post(
        f"/profiles/{name}/activate", params={"wait": True, "force": True}, headers=env.auth
    )
    run = r.json()
    assert run["outcome"] == "active", run
    return run


async def test_a_crash_fails_the_host_then_rolls_back(env: Env) -> None:
    await _activate(env, "baseline")
    switch = await _activate(env, "alpha")
    st = await _until(env, lambda s: s["serving_run_id"] is not None, "serving")
    serving_id = st["serving_run_id"]
    assert (await wait_run(env, switch["id"]))["outcome"] == "active"
    env.journal.log(ALPHA, "RuntimeError: CUDA error: an illegal memory access was encountered")
    env.systemd._set(ALPHA, "failed", "failed", "signal")  # kill -9
    failed = await _until(
        env,
        lambda s: s["state"] in ("failed", "switching", "active") and s["active_profile"] != "alpha",
        "crash seen",
    )
    serving = await wait_run(env, serving_id)
    assert (serving["kind"], serving["outcome"], serving["phase"]) == ("serving", "crashed", "crashed")
    assert "exited on its own (failed, result signal" in serving["error"]
    assert "illegal memory access" in serving["error"]
    assert serving["served_s"] is not None
    assert failed["state"] != "active" or failed["active_profile"] == "baseline"
    # on_failure defaults to rollback for a profile that is not the default: baseline again, linked.
    await _until(env, lambda s: s["state"] == "active" and s["active_profile"] == "baseline", "rolled back")
    rb = next(r for r in await _runs(env) if r["kind"] == "rollback")
    # The host reads active when the engine is; the run's record ends just after it.
    rb = await wait_run(env, rb["id"])
    assert (rb["parent_id"], rb["from_profile"], rb["outcome"]) == (serving_id, "alpha", "active")


async def test_the_default_profile_restarts_within_its_cap(env: Env) -> None:
    env.settings.restart_limit_per_hour = 1
    await _activate(env, "baseline")
    first = (await _until(env, lambda s: s["serving_run_id"] is not None, "serving"))["serving_run_id"]
    env.systemd._set(BASE, "failed", "failed", "exit-code")
    st = await _until(
        env, lambda s: s["state"] == "active" and s["serving_run_id"] not in (None, first), "restarted"
    )
    restart = next(r for r in await _runs(env) if r["kind"] == "switch" and r["parent_id"] == first)
    restart = await wait_run(env, restart["id"])  # the host reads active first; the run ends just after
    assert (restart["profile"], restart["outcome"]) == ("baseline", "active")
    # A second crash within the hour: the cap holds, the host stays failed and says why.
    env.systemd._set(BASE, "failed", "failed", "exit-code")
    st = await _until(
        env, lambda s: s["state"] == "failed" and "restart limit" in (s["reason"] or ""), "capped"
    )
    assert st["active_profile"] is None
    text = (await env.client.get("/metrics")).text
    assert 'k25_host_state{state="failed"} 1.0' in text


async def test_units_changed_with_systemctl_are_followed(env: Env) -> None:
    await _activate(env, "alpha")
    env.systemd._set(ALPHA, "inactive", "dead", "success")  # systemctl stop
    await _until(env, lambda s: s["state"] == "idle" and s["serving_run_id"] is None, "idle")
    env.systemd._set(BETA, "active", "running")  # systemctl start
    st = await _until(
        env,
        lambda s: (
            s["state"] == "active" and s["active_profile"] == "beta" and s["serving_run_id"] is not None
        ),
        "followed",
    )
    runs = await _runs(env)
    external = [r for r in runs if r["kind"] == "external"]
    assert [r["profile"] for r in external] == ["beta", "alpha"]
    details = [(await env.client.get(f"/runs/{r['id']}")).json()["events"][-1]["detail"] for r in external]
    assert "not started by k25-ctl" in details[0]
    assert "stopped outside k25-ctl" in details[1]
    serving = next(r for r in runs if r["id"] == st["serving_run_id"])
    assert (serving["kind"], serving["parent_id"]) == ("serving", external[0]["id"])
    # Another managed unit started beside the active one: a conflict, shown, and no takeover.
    env.systemd._set(ALPHA, "active", "running")
    st = await _until(env, lambda s: s["conflicts"] == [ALPHA], "conflict")
    assert st["active_profile"] == "beta"
    env.systemd._set(ALPHA, "inactive", "dead", "success")
    await _until(env, lambda s: s["conflicts"] == [], "conflict gone")


VLLM = """# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="m",engine="0"}} {gen}
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{model_name="m",engine="0"}} {gen}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {running}
"""


async def test_a_stalled_generation_is_unhealthy_and_recovers(env: Env) -> None:
    await _activate(env, "alpha")
    env.prober.metrics["alpha"] = VLLM.format(gen=500, running=2)  # requests running, counter frozen
    st = await _until(env, lambda s: s["state"] == "unhealthy", "unhealthy")
    assert "2 request(s) running but no token generated" in st["reason"]
    serving = (await env.client.get(f"/runs/{st['serving_run_id']}")).json()
    assert "unhealthy" in [e["phase"] for e in serving["events"]]
    assert st["active_profile"] == "alpha"  # on_hang defaults to none: alert, never kill
    env.prober.metrics["alpha"] = VLLM.format(gen=900, running=2)
    await _until(env, lambda s: s["state"] == "active", "healthy again")


async def _rows(env: Env, run_id: int) -> Any:
    series = (await env.client.get(f"/runs/{run_id}/metrics")).json()
    return series if series["rows"] else None


async def test_serving_metrics_rows_with_a_counter_reset(env: Env) -> None:
    await _activate(env, "alpha")
    st = await _until(env, lambda s: s["serving_run_id"] is not None, "serving")
    # One text per scrape, each seen exactly once (the watch's interval does not decide what it sees).
    gens = [100.0 + 50 * i if i != 20 else 10.0 for i in range(40)]  # the engine restarted once at 20
    script = collections.deque(VLLM.format(gen=g, running=1) for g in gens)
    env.prober.scripted["alpha"] = script

    async def consumed() -> bool:
        return not script

    await eventually(consumed, what="every scripted scrape served")
    series = await eventually(lambda: _rows(env, st["serving_run_id"]), what="a metrics row")
    assert series["rows"], series
    series = (await env.client.get(f"/runs/{st['serving_run_id']}/metrics")).json()
    assert series["rows"], series
    assert all(r["tokens_per_s"] >= 0 and r["generation_tokens"] >= 0 for r in series["rows"])
    assert series["live"]
    text = (await env.client.get("/metrics")).text
    assert 'k25_serving_tokens_per_second{profile="alpha"}' in text

    async def totals_agree() -> bool:
        # Two reads: a row the watch writes between them (a scrape popped above but not yet accounted)
        # moves the run's total first; a row and the run's totals are one transaction, so they meet again.
        rows = (await env.client.get(f"/runs/{st['serving_run_id']}/metrics")).json()["rows"]
        run = (await env.client.get(f"/runs/{st['serving_run_id']}")).json()
        return bool(run["generation_tokens"] == sum(r["generation_tokens"] for r in rows))

    await eventually(totals_agree, what="the run's generated tokens equal to its rows' sum")
    assert (await env.client.get("/runs/999/metrics")).status_code == 404


async def test_a_profile_added_without_a_reload_is_followed_once_a_switch_starts_it(env: Env) -> None:
    """A file dropped into profiles.d and activated at once (no reload): the switch reads it, so its unit
    must be followed like the others, and its crash is a crash (on_failure), not a liveness guess."""
    gamma = "k25-engine@gamma.service"
    env.systemd.known.add(gamma)
    await _activate(env, "baseline")
    (env.settings.profiles_path / "gamma.toml").write_text(PROFILE.format(port=9150))
    await _activate(env, "gamma")
    st = await _until(env, lambda s: s["serving_run_id"] is not None, "serving")
    env.systemd._set(gamma, "failed", "failed", "signal")  # kill -9
    serving = await wait_run(env, st["serving_run_id"])
    assert (serving["outcome"], serving["phase"]) == ("crashed", "crashed"), serving
    assert "exited on its own (failed, result signal" in serving["error"]
    await _until(env, lambda s: s["state"] == "active" and s["active_profile"] == "baseline", "rolled back")


async def test_an_engine_started_outside_k25_ctl_has_its_answer_recorded_once_healthy(env: Env) -> None:
    """Started by hand (or by `sandbox up --activate`): a cold start all the same, so a later park of it can
    be proven by its wake's answer (it could not be before: the wake then always started cold)."""
    env.systemd._set(BETA, "active", "running")  # systemctl start
    st = await _until(
        env, lambda s: s["state"] == "active" and s["active_profile"] == "beta", "the external engine active"
    )
    known = (await env.client.get("/profiles/beta")).json()["known_answer"]
    assert known is not None
    assert known["run_id"] == st["serving_run_id"]
    events = (await env.client.get(f"/runs/{known['run_id']}")).json()["events"]
    assert any(e["detail"].startswith("known answer recorded: ") for e in events), events
