"""Scheduled experiments through the app (systemd's timers faked; the sandbox test uses the real ones):
what `at` accepts, the timer's command, the max_running guard, cancel."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Env
from tests.api.test_drain import _activate, _load
from tests.waiting import eventually

BODY = {"profiles": ["alpha"], "benchmark": {"num_prompts": 2, "max_tokens": 8, "warmups": 0}}


async def test_at_makes_a_timer_that_calls_the_daemon_back(env: Env) -> None:
    c = env.client
    r = await c.post("/experiments", params={"at": "+10min", "max_running": 1}, json=BODY, headers=env.auth)
    assert r.status_code == 202, r.text
    out = r.json()
    assert (out["unit"], out["at"], out["max_running"]) == ("k25-experiment-1.timer", "+10min", 1)
    assert r.headers["location"] == "/schedules/1"
    spec = env.app.state.services.host.timers.units["k25-experiment-1.timer"]
    assert (spec.on_active_s, spec.on_calendar) == (600.0, None)
    assert spec.argv[-3:] == ["schedule", "fire", "1"]
    cal = await c.post("/experiments", params={"at": "Sat 03:00"}, json=BODY, headers=env.auth)
    assert cal.json()["id"] == 2
    listed = (await c.get("/schedules")).json()
    assert [(s["id"], s["at"]) for s in listed] == [(1, "+10min"), (2, "Sat 03:00")]
    gone = await c.delete("/schedules/2", headers=env.auth)
    assert (gone.status_code, gone.json()) == (200, {"id": 2, "cancelled": True})
    assert [s["id"] for s in (await c.get("/schedules")).json()] == [1]
    assert (await c.delete("/schedules/2", headers=env.auth)).status_code == 404


async def test_a_fire_onto_a_host_serving_too_much_is_skipped(env: Env) -> None:
    c = env.client
    assert (await _activate(env, "baseline"))["outcome"] == "active"
    env.prober.metrics["baseline"] = _load(3)

    async def serving_three() -> Any:
        now = (await c.get("/status")).json()["serving"]
        return now and now["running"] == 3

    await eventually(serving_three, what="the watch sees 3 running")
    sid = (
        await c.post("/experiments", params={"at": "+1h", "max_running": 2}, json=BODY, headers=env.auth)
    ).json()["id"]
    fired = await c.post(f"/schedules/{sid}/fire", headers=env.auth)
    assert fired.status_code == 202
    run = (await c.get(f"/runs/{fired.json()['run_id']}")).json()
    assert (run["kind"], run["outcome"]) == ("experiment", "skipped")
    assert "serves 3 requests (more than max_running = 2)" in run["error"]
    assert (await c.post("/schedules/99/fire", headers=env.auth)).status_code == 404


async def test_bad_times_and_bad_requests_are_refused_before_anything(env: Env) -> None:
    c = env.client
    for at in ("", "+soon", "+5 parsecs"):
        r = await c.post("/experiments", params={"at": at}, json=BODY, headers=env.auth)
        assert r.status_code == 422, (at, r.text)
    r = await c.post("/experiments", params={"at": "+1h"}, json={"profiles": ["nope"]}, headers=env.auth)
    assert r.status_code == 404
    assert (await c.get("/schedules")).json() == []
    assert env.app.state.services.host.timers.units == {}
