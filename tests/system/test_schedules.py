"""Experiments scheduled through systemd in the sandbox: `k25-ctl experiment ... --at +3s` makes a
transient timer whose service calls the daemon back; the experiment runs, shows in /experiments, and its
timer is gone afterwards. One that fires onto a busy host records a `skipped` run with the reason."""

from __future__ import annotations

import json
from typing import Any

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside
from tests.system.test_api_cli import _cli
from tests.waiting import eventually_sync

SPEC = ["--requests", "2", "--max-tokens", "8", "--warmups", "0"]


def _baseline(api: Api) -> None:
    st = api.status()
    if (st["state"], st["active_profile"]) != ("active", "baseline"):
        assert api.activate("baseline")["outcome"] == "active"


def _timers(sandbox: SandboxInfo) -> str:
    return inside(sandbox, "systemctl", "list-timers", "--all", "--no-pager", "k25-experiment-*").stdout


def _experiments(api: Api) -> list[Any]:
    return api.client.get("/experiments").json()  # type: ignore[no-any-return]


def test_a_scheduled_experiment_runs_and_its_timer_goes(api: Api, sandbox: SandboxInfo) -> None:
    _baseline(api)
    before = {e["run_id"] for e in _experiments(api)}
    r = _cli(sandbox, "experiment", "vllm-eagle3", "--at", "+3s", "--json", *SPEC)
    assert r.returncode == 0, r.stdout + r.stderr
    schedule = json.loads(r.stdout)
    assert schedule["unit"] == f"k25-experiment-{schedule['id']}.timer"
    assert schedule["unit"] in _timers(sandbox)  # systemd holds it, not k25-ctl
    listed = _cli(sandbox, "schedule", "--json")
    assert [s["id"] for s in json.loads(listed.stdout)] == [schedule["id"]]

    def ran() -> Any:
        new = [e for e in _experiments(api) if e["run_id"] not in before]
        return new if new and new[0]["outcome"] != "running" else None

    exp = eventually_sync(ran, what="the scheduled experiment ran", within_s=120)[0]
    assert exp["outcome"] == "ok", exp
    assert [s["profile"] for s in exp["steps"]] == ["vllm-eagle3"]
    eventually_sync(lambda: schedule["unit"] not in _timers(sandbox), what="the timer is gone", within_s=30)
    assert json.loads(_cli(sandbox, "schedule", "--json").stdout) == []
    assert api.status()["active_profile"] == "baseline"  # restored


def test_one_that_fires_onto_a_busy_host_is_skipped(api: Api, sandbox: SandboxInfo) -> None:
    _baseline(api)
    body = {"profiles": ["vllm-eagle3"], "benchmark": {"num_prompts": 2, "max_tokens": 8, "warmups": 0}}
    scheduled = api.client.post("/experiments", params={"at": "+2s"}, json=body)
    assert scheduled.status_code == 202, scheduled.text
    switch = api.activate("slow", wait=False)  # 8 s of loading: the timer fires meanwhile

    mine = f"schedule {scheduled.json()['id']} "

    def skipped() -> Any:
        runs = api.client.get("/runs", params={"limit": 20}).json()
        return next((r for r in runs if r["kind"] == "experiment" and mine in (r["error"] or "")), None)

    run = eventually_sync(skipped, what="this schedule's experiment run", within_s=60)
    assert run["outcome"] == "skipped", run
    assert f"schedule {scheduled.json()['id']} (+2s) skipped: the host is busy" in run["error"]
    api.wait_run(switch["run_id"])
    _baseline(api)


def test_a_bad_time_is_refused_and_leaves_nothing(api: Api, sandbox: SandboxInfo) -> None:
    body = {"profiles": ["baseline"]}
    for at in ("+soon", "not a calendar"):
        r = api.client.post("/experiments", params={"at": at}, json=body)
        assert r.status_code == 422, r.text
    assert api.client.get("/schedules").json() == []
    missing = api.client.post("/experiments", params={"at": "+1h"}, json={"profiles": ["nope"]})
    assert missing.status_code == 404
    assert api.client.get("/schedules").json() == []
