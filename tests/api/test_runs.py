"""The run record end to end through the API: final phases, rollback links, errors of every kind that end
a run cleanly, what a hung probe says, profiles read afresh at each switch."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.core.errors import StoreError
from daemon.core.run_types import Phase
from daemon.store.queries import Store
from tests.api.conftest import PROFILE, Env, wait_run
from tests.waiting import eventually


async def _settled(env: Env) -> Any:
    async def status() -> Any:
        st = (await env.client.get("/status")).json()
        return st if st["state"] != "switching" else None

    return await eventually(status, what="the host leaves switching")


def _store(env: Env) -> Store:
    store: Store = env.app.state.services.store
    return store


async def test_runs_end_on_their_final_phase_and_status_is_cleared(env: Env) -> None:
    run = (await env.client.post("/profiles/alpha/activate", params={"wait": True}, headers=env.auth)).json()
    assert (run["outcome"], run["phase"]) == ("active", "active")
    assert run["progress"] == {"percent": 100, "done": 4, "total": 4}
    st = (await env.client.get("/status")).json()
    assert st["state"] == "active"
    assert (st["phase"], st["run_id"], st["target_profile"]) == (None, None, None)
    assert (st["progress_percent"], st["progress_done"], st["progress_total"]) == (None, None, None)


async def test_rollback_is_linked_before_the_failed_runs_final_event(env: Env) -> None:
    env.systemd.crash.add("k25-engine@beta.service")
    r = await env.client.post("/profiles/beta/activate", headers=env.auth)
    run_id = r.json()["run_id"]
    sse = await env.client.get(f"/runs/{run_id}/events")  # follows the run to its final event
    events = [json.loads(line[5:]) for line in sse.text.splitlines() if line.startswith("data:")]
    phases = [e["phase"] for e in events]
    assert phases[-2:] == ["rollback", "failed"]
    assert events[-1]["final"] is True
    rb_id = events[-1]["rollback_run_id"]
    assert rb_id is not None
    assert f"(run {rb_id})" in events[-2]["detail"]
    failed, rb = await wait_run(env, run_id), await wait_run(env, rb_id)
    assert (failed["phase"], failed["outcome"]) == ("failed", "failed")
    assert (rb["kind"], rb["parent_id"], rb["from_profile"], rb["profile"]) == (
        "rollback",
        run_id,
        "beta",
        "baseline",
    )
    assert (rb["phase"], rb["outcome"]) == ("active", "active")
    assert (await _settled(env))["active_profile"] == "baseline"


async def test_load_seconds_are_kept_when_http_came_up_but_the_probe_failed(env: Env) -> None:
    env.prober.broken.add("alpha")
    run = (await env.client.post("/profiles/alpha/activate", params={"wait": True}, headers=env.auth)).json()
    assert run["outcome"] == "failed"
    assert run["load_seconds"] is not None
    assert "probe completion answered HTTP 500" in run["error"]


async def test_stages_printed_before_http_up_are_kept_when_the_journal_lags(env: Env) -> None:
    env.journal.delivered.clear()  # health passes and the probe finishes before any line arrives
    run_id = (await env.client.post("/profiles/alpha/activate", headers=env.auth)).json()["run_id"]

    async def probed() -> bool:
        run = (await env.client.get(f"/runs/{run_id}")).json()
        return any("probe generation finished" in e["detail"] for e in run["events"])

    await eventually(probed, what="the probe finishes")
    env.journal.delivered.set()
    run = await wait_run(env, run_id)
    assert run["outcome"] == "active"
    stages = run["load_stages"]
    assert stages.pop("known_answer") >= 0  # recorded after the probe, its own stage
    assert stages == {"weights": 1.5}


async def test_a_journal_that_cannot_be_followed_fails_the_run_and_never_sticks(env: Env) -> None:
    env.journal.unreadable.update({"k25-engine@alpha.service", "k25-engine@baseline.service"})
    r = await env.client.post("/profiles/alpha/activate", headers=env.auth)
    run = await wait_run(env, r.json()["run_id"])
    assert run["outcome"] == "failed"
    assert "FileNotFoundError" in run["error"]
    assert "journalctl" in run["error"]
    st = await _settled(env)
    # The rollback hit the same broken journal: degraded, with both reasons, and no run left running.
    assert st["state"] == "degraded"
    assert "rollback to baseline failed" in st["reason"]
    runs = (await env.client.get("/runs")).json()
    assert [x["outcome"] for x in runs] == ["failed", "failed"]


async def test_a_database_error_during_a_switch_fails_the_run(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(env)
    real = store.add_event
    broken = {"alpha": True}

    def add_event(**kw: Any) -> int:
        if kw["phase"] is Phase.PROBING and broken.pop("alpha", False):
            raise StoreError("the runs database failed: OperationalError: disk I/O error")
        return real(**kw)

    monkeypatch.setattr(store, "add_event", add_event)
    r = await env.client.post("/profiles/alpha/activate", headers=env.auth)
    run = await wait_run(env, r.json()["run_id"])
    assert run["outcome"] == "failed"
    assert "disk I/O error" in run["error"]
    st = await _settled(env)
    assert (st["state"], st["active_profile"]) == ("active", "baseline")  # rolled back


async def test_a_failure_to_record_the_end_leaves_the_host_degraded_not_switching(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(env)

    def finish_run(**kw: Any) -> int:
        raise StoreError("the runs database failed: OperationalError: database or disk is full")

    env.prober.broken.add("alpha")
    monkeypatch.setattr(store, "finish_run", finish_run)
    await env.client.post("/profiles/alpha/activate", headers=env.auth)
    st = await _settled(env)
    assert st["state"] == "degraded"
    assert "database or disk is full" in st["reason"]
    assert (await env.client.post("/profiles/beta/activate", headers=env.auth)).status_code == 202  # not busy


async def test_a_hung_probe_says_what_hung(env: Env) -> None:
    (env.settings.profiles_path / "hangs.toml").write_text(PROFILE.format(port=9150).replace("= 5", "= 0.5"))
    env.systemd.known.add("k25-engine@hangs.service")
    env.prober.gate.clear()  # health passes, the generation never starts
    run = (await env.client.post("/profiles/hangs/activate", params={"wait": True}, headers=env.auth)).json()
    env.prober.gate.set()
    assert run["outcome"] == "failed"
    assert (
        "not ready within probe_timeout_s=0s: health passed, but the probe generation did not start"
        in run["error"]
    )
    details = [e["detail"] for e in run["events"] if e["phase"] == "probing"]
    assert any(d.startswith("health passed (HTTP 200)") for d in details)


async def test_each_switch_reads_its_profile_afresh(env: Env) -> None:
    first = (
        await env.client.post("/profiles/alpha/activate", params={"wait": True}, headers=env.auth)
    ).json()
    path = env.settings.profiles_path / "alpha.toml"
    path.write_text(path.read_text() + 'extra_args = ["--max-model-len", "4096"]\n')
    second = (
        await env.client.post(
            "/profiles/alpha/activate", params={"wait": True, "force": True}, headers=env.auth
        )
    ).json()
    assert second["argv"][-2:] == ["--max-model-len", "4096"]
    assert first["argv"] != second["argv"]
    assert first["profile_sha256"] != second["profile_sha256"]
    launch = json.loads((env.settings.state_dir / "launch/alpha.json").read_text())
    assert (launch["argv"], launch["run_id"], launch["profile_sha256"]) == (
        second["argv"],
        second["id"],
        second["profile_sha256"],
    )
    assert (env.settings.state_dir / "launch/alpha.json").stat().st_mode & 0o077 == 0


async def test_reload_reports_new_and_invalid_profiles(env: Env) -> None:
    (env.settings.profiles_path / "gamma.toml").write_text(PROFILE.format(port=9160))
    (env.settings.profiles_path / "delta.toml").write_text(PROFILE.format(port=9161) + "bogus = 1\n")
    assert (await env.client.post("/profiles/reload")).status_code == 401
    r = (await env.client.post("/profiles/reload", headers=env.auth)).json()
    assert "gamma" in r["valid"]
    assert any("delta.toml: key 'bogus': unknown key" in line for line in r["invalid"])
    names = {p["name"]: p["valid"] for p in (await env.client.get("/profiles")).json()}
    assert (names["gamma"], names["delta"]) == (True, False)
    bad = await env.client.post("/profiles/delta/activate", headers=env.auth)
    assert bad.status_code == 404
    assert "unknown key" in bad.json()["detail"]


async def test_openapi_describes_every_response(env: Env) -> None:
    spec = (await env.client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    assert {"StatusOut", "ProfileOut", "RunOut", "TeardownPlanOut", "TeardownRunOut", "AcceptedOut"} <= set(
        schemas
    )
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            for code, answer in op["responses"].items():
                if code.startswith("2"):
                    content = answer.get("content")
                    assert content, (method, path, code)
                    if "application/json" in content:
                        assert content["application/json"]["schema"], (method, path, code)
    assert schemas["StatusOut"]["properties"]["state"]["type"] == "string"
