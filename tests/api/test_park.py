"""Parking through the app with fake host ports: the park and the wake as the engine's endpoints answer
them, the state /status and /profiles show, a refused sleep that falls back to a stop, and unpark."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from daemon.host.calibration import RATE_KEYS
from daemon.parking import rates
from daemon.parking.costs import DEFAULT_RATES
from tests.api.conftest import PROFILE, Env, running_env, wait_run
from tests.waiting import eventually

PARKS = PROFILE.format(port=9100) + 'park = "sleep"\n'


async def _activate(env: Env, name: str) -> Any:
    r = await env.client.post(f"/profiles/{name}/activate", params={"wait": True}, headers=env.auth)
    run = r.json()
    assert run["outcome"] == "active", run
    return run


async def _parkable_baseline(env: Env, tmp_path: Path) -> None:
    (tmp_path / "profiles.d" / "baseline.toml").write_text(PARKS)
    assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200
    await _activate(env, "baseline")


async def _parked_while_alpha_serves(env: Env, tmp_path: Path) -> str:
    """baseline parked by the switch to alpha; its engine answers as awake from now on (the next wake's
    view). Its unit."""
    await _parkable_baseline(env, tmp_path)
    env.prober.json_answers[("baseline", "/is_sleeping")] = {"is_sleeping": True}
    await _activate(env, "alpha")
    env.prober.json_answers[("baseline", "/is_sleeping")] = {"is_sleeping": False}
    return "k25-engine@baseline.service"


def _details(run: Any, phase: str) -> list[str]:
    return [e["detail"] for e in run["events"] if e["phase"] == phase]


async def test_park_then_wake(tmp_path: Path) -> None:
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        await _parkable_baseline(env, tmp_path)
        unit = "k25-engine@baseline.service"
        env.prober.json_answers[("baseline", "/is_sleeping")] = {"is_sleeping": True}
        away = await _activate(env, "alpha")
        assert ("baseline", "/sleep?level=1") in env.prober.calls
        parked = _details(away, "parking")[-1]
        assert parked.startswith("parked baseline (main PID ")
        # What the host's rates predicted beside what it took (issue 51): the first park of this process.
        assert re.search(
            r"\) in \d+\.\ds \(predicted \d+\.\ds: level 1, first park \(registered pinning\)\)", parked
        )
        assert env.systemd.states[unit].active_state == "active"  # not stopped
        assert not any(d.startswith(f"stopping {unit}") for d in _details(away, "stop"))
        st = (await env.client.get("/status")).json()
        assert [p["profile"] for p in st["parked"]] == ["baseline"]
        assert st["conflicts"] == []  # a parked unit that runs is no conflict
        profiles = {p["name"]: p["parked"] for p in (await env.client.get("/profiles")).json() if p["valid"]}
        assert profiles == {"baseline": True, "alpha": False, "beta": False}
        metrics = (await env.client.get("/metrics")).text
        assert 'k25_parked{profile="baseline"} 1.0' in metrics
        assert (
            'k25_parked_gpu_memory_mib{gpu="0",profile="baseline"}' not in metrics
        )  # no GPU here: none held

        env.prober.json_answers[("baseline", "/is_sleeping")] = {"is_sleeping": False}
        back = await _activate(env, "baseline")
        assert ("baseline", "/wake_up") in env.prober.calls
        assert "wake" in back["load_stages"]
        woke = _details(back, "waking")[-1]
        assert re.fullmatch(
            r"baseline woke in \d+\.\ds \(predicted \d+\.\ds: level 1, first park.*\) and serves", woke
        )
        assert (await env.client.get("/status")).json()["parked"] == []


async def test_a_refused_sleep_stops_the_engine_and_says_why(tmp_path: Path) -> None:
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        await _parkable_baseline(env, tmp_path)
        env.prober.call_status = 500
        away = await _activate(env, "alpha")
        assert "not parked: POST /sleep?level=1 answered HTTP 500; stopping baseline instead" in _details(
            away, "parking"
        )
        assert env.systemd.states["k25-engine@baseline.service"].active_state == "inactive"
        assert (await env.client.get("/status")).json()["parked"] == []


async def test_unpark_needs_a_parked_profile_and_the_token(env: Env) -> None:
    assert (await env.client.post("/profiles/baseline/unpark")).status_code == 401
    r = await env.client.post("/profiles/baseline/unpark", headers=env.auth)
    assert (r.status_code, r.json()) == (404, {"detail": "profile 'baseline' is not parked"})


async def test_a_cold_start_records_the_known_answer_that_profiles_show(tmp_path: Path) -> None:
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        (tmp_path / "profiles.d" / "baseline.toml").write_text(PARKS)
        assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200
        cold = await _activate(env, "baseline")
        assert "known_answer" in cold["load_stages"]
        assert any(d.startswith("known answer recorded: ") for d in _details(cold, "probing"))
        alpha = await _activate(env, "alpha")
        shown = (await env.client.get("/profiles/baseline")).json()["known_answer"]
        assert shown["run_id"] == cold["id"]
        assert shown["age_s"] >= 0
        assert [(a["kind"], a["text"]) for a in shown["answers"]][:2] == [
            ("completion", " The capital of France is"),
            ("chat", " Name the three primary colours."),
        ]
        assert shown["answers"][2]["text"].startswith(" Item 0: the river")  # the long one (KV blocks)
        assert shown["agreement"] is None  # it is the default profile
        other = (await env.client.get("/profiles/alpha")).json()["known_answer"]
        assert other["run_id"] == alpha["id"]
        assert other["agreement"]["equal"] is True
        assert other["agreement"]["text"] == "vs baseline: completion: equal; chat: equal; completion: equal"
        compared = (await env.client.get("/compare", params={"baseline": "baseline"})).json()
        assert [(a["profile"], a["equal"]) for a in compared["answers"]] == [("alpha", True)]


async def test_a_wake_that_answers_garbage_is_stopped_and_started_cold(tmp_path: Path) -> None:
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        unit = await _parked_while_alpha_serves(env, tmp_path)
        env.prober.garbled.add("baseline")  # the wake restores no weights: fluent garbage, /health 200
        env.prober.answers_asked.clear()
        back = await _activate(env, "baseline")
        assert env.prober.answers_asked[:4] == ["baseline"] * 4  # two tries of two requests
        why = next(
            d for d in _details(back, "stop") if d.startswith("stopping parked baseline: wake failed: ")
        )
        said = (
            "after the wake '!! !! !! !!' vs before the park 'The capital of France is' (recorded by run 1)"
        )
        assert f"the completion answer differs from token 0: {said}" in why
        assert any(d == unit for d in _details(back, "start"))  # then the normal cold start
        assert back["outcome"] == "active"
        assert "known_answer" in back["load_stages"]
        # The cold start's own answer (garbage here: the fake still garbles) is what is recorded now.
        shown = (await env.client.get("/profiles/baseline")).json()["known_answer"]
        assert shown["run_id"] == back["id"]


async def test_a_wake_cancelled_midway_is_no_longer_parked_and_is_stopped(tmp_path: Path) -> None:
    """A cancel while the wake's probe runs (the simulation: an experiment cancelled as it woke a parked
    profile) once left the engine awake but listed as parked, spared by every teardown after."""
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        unit = await _parked_while_alpha_serves(env, tmp_path)
        env.prober.gate.clear()  # the probe after the wake hangs
        r = await env.client.post("/profiles/baseline/activate", headers=env.auth)
        run_id = r.json()["run_id"]

        async def probing() -> bool:
            return ("baseline", "/wake_up") in env.prober.calls

        await eventually(probing, what="the wake posted")
        assert (await env.client.post(f"/runs/{run_id}/cancel", headers=env.auth)).status_code == 202

        async def ended() -> Any:
            run = (await env.client.get(f"/runs/{run_id}")).json()
            return run if run["outcome"] != "running" else None

        run = await eventually(ended, what=f"run {run_id} ends")
        env.prober.gate.set()  # the rollback's probe passes
        assert run["outcome"] == "cancelled", run
        assert env.systemd.states[unit].active_state == "inactive"  # stopped by the cleanup, not spared
        await wait_run(env, run_id)  # and its rollback
        st = (await env.client.get("/status")).json()
        assert (st["state"], st["active_profile"], st["parked"]) == ("active", "alpha", [])


async def test_a_profile_that_answers_otherwise_from_the_first_token_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Greedy speculative decoding is lossless: a profile of the same model that answers differently from
    token 0 has the wrong target model or a broken drafter. Information, not a gate: it still serves."""
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        await _activate(env, "baseline")
        env.prober.garbled.add("alpha")
        with caplog.at_level(logging.WARNING, logger="k25.answers"):
            run = await _activate(env, "alpha")
        warned = [r.getMessage() for r in caplog.records if "from token 0" in r.getMessage()]
        assert warned, caplog.text
        said = f"run {run['id']}: alpha answers differently from baseline from token 0: wrong target model or"
        assert warned[0].startswith(said)
        shown = (await env.client.get("/profiles/alpha")).json()["known_answer"]["agreement"]
        assert (shown["equal"], shown["from_first_token"]) == (False, True)
        assert (
            shown["text"]
            == "vs baseline: completion: differs from token 0 of 4; chat: differs from token 0 of 4; "
            "completion: differs from token 0 of 4"
        )


async def test_auto_takes_level_2_for_weights_a_parked_profile_shares_and_level_1_otherwise(
    tmp_path: Path,
) -> None:
    """Issue 51: `park_level = "auto"`. pa parks first: nothing else is parked and its pinned bytes fit,
    so level 1 (a fast wake). pb, on the same weight files (resident: a profile on weights the page cache
    holds), parks while pa is parked: level 2, nothing pinned. Each run says which level, why, and each
    way's predicted seconds; the wake of pb takes level 2's way back (the weights reloaded)."""
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        auto = 'park = "sleep"\npark_level = "auto"\n'
        for name, port in (("pa", 9111), ("pb", 9112)):
            (tmp_path / "profiles.d" / f"{name}.toml").write_text(PROFILE.format(port=port) + auto)
            env.systemd.known.add(f"k25-engine@{name}.service")
        assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200
        for name in ("pa", "pb"):
            env.prober.json_answers[(name, "/is_sleeping")] = {"is_sleeping": True}
        await _activate(env, "pa")
        away_a = await _activate(env, "pb")  # pa parks
        said_a = next(d for d in _details(away_a, "parking") if d.startswith("park_level auto"))
        assert said_a.startswith("park_level auto: level 1, a fast wake"), said_a
        assert re.search(r"level 1: park \d+\.\ds, wake \d+\.\ds, [\d.]+ GB pinned; level 2: park", said_a)
        assert ("pa", "/sleep?level=1") in env.prober.calls
        away_b = await _activate(env, "alpha")  # pb parks beside pa, on the same weights
        said_b = next(d for d in _details(away_b, "parking") if d.startswith("park_level auto"))
        assert said_b.startswith(
            "park_level auto: level 2, its weights are resident in the page cache and shared with parked pa"
        ), said_b
        assert ("pb", "/sleep?level=2") in env.prober.calls
        st = (await env.client.get("/status")).json()
        assert {p["profile"]: p["level"] for p in st["parked"]} == {"pa": 1, "pb": 2}
        env.prober.json_answers[("pb", "/is_sleeping")] = {"is_sleeping": False}
        await _activate(env, "pb")  # the wake of a level-2 park reloads the weights
        assert ("pb", "/collective_rpc") in env.prober.calls


async def test_the_host_shows_its_rates_and_each_parking_profiles_ways(tmp_path: Path) -> None:
    """Issue 51: GET /host (the page's "Parking costs"): the documented defaults until `k25-ctl host
    calibrate` stored measured rates, then those, with when; each parking profile's ways predicted from
    its last residency scan (no scan per request)."""
    async with running_env(tmp_path, park_ram_reserve_bytes=0) as env:
        (tmp_path / "profiles.d" / "baseline.toml").write_text(PARKS)
        assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200

        async def scanned() -> Any:
            body = (await env.client.get("/host")).json()
            return body if body["parking"] else None

        host = await eventually(scanned, what="baseline's residency scanned")
        assert host["rates"]["measured_at"] is None
        assert host["rates"]["pin_process"] == DEFAULT_RATES.pin_process
        [baseline] = host["parking"]
        assert baseline["profile"] == "baseline"
        assert [w["name"] for w in baseline["ways"]][:3] == [
            "level 1, first park (default pinning)",
            "level 1, first park (registered pinning)",
            "level 1, later park",
        ]
        measured = asdict(DEFAULT_RATES) | {"pin_process": 2.5}
        rates.save(env.settings.state_dir, {k: measured[k] for k in RATE_KEYS}, python="/usr/bin/python3")
        after = (await env.client.get("/host")).json()
        assert after["rates"]["pin_process"] == 2.5
        assert after["rates"]["measured_at"] is not None
