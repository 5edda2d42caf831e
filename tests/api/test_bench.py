"""Benchmarks and experiments through the API: a real SQLite, fake units, and the benchmark's requests
served in-process by the fake vLLM (its real /metrics counters and /version)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.switching import transaction, upgrades
from k25_sandbox.fake_install import DEFAULT_VERSIONS
from tests.api.conftest import Env, running_env, wait_run

SPEC = {"concurrency": [1, 2], "num_prompts": 4, "max_tokens": 16, "warmups": 1}


async def _activate(env: Env, name: str) -> None:
    r = await env.client.post(f"/profiles/{name}/activate", params={"wait": True}, headers=env.auth)
    assert r.status_code in (200, 202), r.text


async def _post(env: Env, path: str, body: Any) -> Any:
    return await env.client.post(path, json=body, headers=env.auth)


async def test_nothing_to_measure_while_idle(env: Env) -> None:
    r = await _post(env, "/benchmarks", SPEC)
    assert r.status_code == 409
    assert "no profile serves" in r.json()["detail"]
    assert (await env.client.get("/benchmarks")).json() == []
    cmp = (await env.client.get("/compare")).json()
    assert cmp["rows"] == []
    assert cmp["notes"] == ["no benchmarks recorded yet"]


async def test_bad_specs_are_refused_with_what_is_wrong(env: Env) -> None:
    await _activate(env, "baseline")
    for body, words in (
        ({"dataset": "custom"}, "needs prompts"),
        ({"prompts": ["hi"]}, "use dataset 'custom'"),
        ({"concurrency": []}, "at least 1"),
        ({"num_prompts": 0}, "greater than or equal to 1"),
        ({"tokens": 5}, "Extra inputs are not permitted"),
    ):
        r = await _post(env, "/benchmarks", body)
        assert r.status_code == 422, (body, r.text)
        assert words in r.text, (body, r.text)
    assert (await _post(env, "/benchmarks", SPEC | {"profile": "alpha"})).status_code == 409
    r = await _post(env, "/experiments", {"profiles": ["nope"]})
    assert r.status_code == 404
    assert "nope" in r.json()["detail"]
    r = await _post(env, "/experiments", {"profiles": ["alpha", "beta"], "rounds": 2, "until_decided": True})
    assert r.status_code == 422
    assert "two profiles, rounds >= 3" in r.text  # issue 53: an early stop needs rounds to stop between
    r = await _post(env, "/experiments", {"profiles": ["alpha", "alpha"]})
    assert r.status_code in (400, 422)
    assert "twice" in r.json()["detail"]
    assert (await env.client.post("/benchmarks", json=SPEC)).status_code == 401  # writes need the token
    runs = (await env.client.get("/runs")).json()
    assert not any(r["kind"] in ("benchmark", "experiment") for r in runs)  # nothing half-created


async def test_a_benchmark_is_a_run_with_levels_provenance_and_an_export(env: Env) -> None:
    await _activate(env, "baseline")
    r = await _post(env, "/benchmarks", SPEC)
    assert r.status_code == 202
    run_id = r.json()["run_id"]
    assert r.headers["Location"] == f"/benchmarks/{run_id}"
    run = await wait_run(env, run_id)
    assert (run["kind"], run["profile"], run["outcome"]) == ("benchmark", "baseline", "ok")
    assert run["argv"]
    assert run["profile_sha256"]
    measuring = [e for e in run["events"] if e["phase"] == "measuring"]
    assert any("warm-up" in e["detail"] for e in measuring)
    assert any("4/4" in e["detail"] for e in measuring)
    b = (await env.client.get(f"/benchmarks/{run_id}", params={"requests": True})).json()
    assert b["provenance"]["engine_version"] == DEFAULT_VERSIONS["vllm"]  # the fake as installed
    assert b["provenance"]["serving_run_id"] == (await env.client.get("/status")).json()["serving_run_id"]
    assert [lv["concurrency"] for lv in b["levels"]] == [1, 2]
    s = b["levels"][0]["summary"]
    assert (s["completed"], s["failed"], s["total_output_tokens"]) == (4, 0, 64)
    # The counters moved exactly by the level's own requests: acceptance from them, no other traffic.
    assert s["engine_generation_tokens"] == 64
    assert s["other_traffic"] is False
    assert s["acceptance_rate"] is not None
    assert abs(s["acceptance_rate"] - 0.5) < 0.1
    assert len(b["levels"][0]["requests"]) == 4
    export = (await env.client.get(f"/benchmarks/{run_id}/export")).json()
    assert export[0]["spec_decode_acceptance_rate"] == s["acceptance_rate"] * 100
    assert {"duration", "completed", "request_throughput", "median_tpot_ms", "max_concurrency"} <= set(
        export[0]
    )
    listed = (await env.client.get("/benchmarks", params={"profile": "baseline"})).json()
    assert [x["run_id"] for x in listed] == [run_id]


async def test_an_experiment_measures_each_profile_and_restores(env: Env) -> None:
    await _activate(env, "baseline")
    spec = {"concurrency": [1], "num_prompts": 2, "max_tokens": 8, "warmups": 0}
    r = await _post(env, "/experiments", {"profiles": ["alpha", "beta"], "benchmark": spec, "repeats": 2})
    assert r.status_code == 202
    exp_id = r.json()["run_id"]
    run = await wait_run(env, exp_id)
    exp = (await env.client.get(f"/experiments/{exp_id}")).json()
    assert run["outcome"] == "ok", exp
    assert [s["profile"] for s in exp["steps"]] == ["alpha", "beta"]
    assert all(s["outcomes"] == ["ok", "ok"] for s in exp["steps"])
    assert exp["restore"] == {"profile": "baseline", "switch_run_id": exp["restore"]["switch_run_id"],
                              "ok": True, "error": None}  # fmt: skip
    st = (await env.client.get("/status")).json()
    assert (st["state"], st["active_profile"], st["job"]) == ("active", "baseline", None)
    switch = (await env.client.get(f"/runs/{exp['steps'][0]['switch_run_id']}")).json()
    assert switch["parent_id"] == exp_id  # each step's switch is linked to the experiment
    cmp = (await env.client.get("/compare", params={"baseline": "alpha"})).json()
    rows = {x["profile"]: x for x in cmp["rows"]}
    assert set(rows) == {"alpha", "beta"}
    assert rows["beta"]["repeats"] == 2
    assert rows["alpha"]["verdict"] == "baseline"
    # Same fake engine behind both: the verdict follows the measured speedup and the repeats' noise
    # (timing on a loaded machine decides which side of the noise it lands).
    beta = rows["beta"]
    assert beta["noise_assumed"] is False
    assert beta["noise"] > 0
    expected = ("faster" if beta["speedup"] > 1 + beta["noise"]
                else "slower" if beta["speedup"] < 1 - beta["noise"] else "within noise")  # fmt: skip
    assert beta["verdict"] == expected
    assert (await env.client.get("/experiments")).json()[0]["run_id"] == exp_id


async def test_an_experiment_in_rounds_alternates_and_judges_from_the_requests(env: Env) -> None:
    """Two rounds of alpha and beta (ABBA: alpha beta | beta alpha, three switches), each profile's
    requests pooled over its rounds and judged against the first's: the verdict and its interval in the
    experiment's last event, its record and its comparison; per-round figures."""
    await _activate(env, "alpha")
    spec = {"concurrency": [2], "num_prompts": 12, "max_tokens": 8, "warmups": 0}
    r = await _post(env, "/experiments", {"profiles": ["alpha", "beta"], "benchmark": spec, "rounds": 2})
    assert r.status_code == 202, r.text
    exp_id = r.json()["run_id"]
    run = await wait_run(env, exp_id)
    exp = (await env.client.get(f"/experiments/{exp_id}")).json()
    assert run["outcome"] == "ok", exp
    assert exp["orders"] == [["alpha", "beta"], ["beta", "alpha"]]
    assert [(s["round"], s["profile"]) for s in exp["steps"]] == [
        (0, "alpha"),
        (0, "beta"),
        (1, "beta"),
        (1, "alpha"),
    ]
    # Already active, or the profile that ended the round before: no switch run.
    assert [s["switch_run_id"] is not None for s in exp["steps"]] == [False, True, False, True]
    assert [(x["round"], x["profile"]) for x in exp["rounds"]] == [
        (0, "alpha"),
        (0, "beta"),
        (1, "beta"),
        (1, "alpha"),
    ]
    assert all(x["output_throughput"] > 0 for x in exp["rounds"])
    rows = {x["profile"]: x for x in exp["comparison"]["rows"]}
    beta = rows["beta"]
    assert beta["repeats"] == 2  # its two rounds, pooled
    judged = beta["judged"]["throughput"]
    assert judged["samples"] == [24, 24]
    # Each benchmark stored with its round: the interval is taken over the rounds (issue 49).
    assert len(beta["rounds"]) == 2
    assert (judged["scope"], judged["rounds"]) == ("rounds", [2, 2])
    assert not any(n.startswith("one round a side") for n in exp["comparison"]["notes"])
    assert judged["verdict"] == beta["verdict"]
    assert beta["verdict"] in ("faster", "slower", "no difference detected")
    line = f"beta: {beta['verdict_text']}"
    assert exp["verdicts"][0] == line
    assert line in [e["detail"] for e in run["events"]]
    assert line in run["events"][-1]["detail"]  # the last event: the whole result
    assert {"ttft", "tpot", "e2el"} <= set(beta["judged"])


async def test_allow_names_every_method_of_a_path(env: Env) -> None:
    # GET (reads) and POST (writes) of /benchmarks live in two routers; a 405 names both.
    for path, allow in (
        ("/benchmarks", "GET, POST"),
        ("/experiments", "GET, POST"),
        ("/profiles/reload", "POST"),
    ):
        r = await env.client.request("DELETE", path)
        assert (r.status_code, r.headers["allow"]) == (405, allow)


async def test_a_follower_that_joins_after_the_end_gets_the_progress_steps(env: Env) -> None:
    """The stored events carry each progress step as the live ones did: `k25-ctl ... --wait` that connects
    late (a fast warm on a busy machine) still draws its bars (CI: a 64 MiB warm ended before the CLI
    followed it, and its steps came back as plain lines)."""
    await _activate(env, "baseline")
    r = await _post(env, "/benchmarks", SPEC | {"num_prompts": 10})
    run = await wait_run(env, r.json()["run_id"])
    sse = await env.client.get(f"/runs/{run['id']}/events")
    events = [json.loads(line[5:]) for line in sse.text.splitlines() if line.startswith("data:")]
    steps = [e for e in events if e.get("progress_percent") is not None]
    for level in ("level 1/2: ", "level 2/2: "):  # in order at concurrency 2 too: the bar ends full
        assert [e["progress_percent"] for e in steps if e["detail"].startswith(level)] == [
            0,
            *range(10, 101, 10),
        ]
    assert steps[-1]["progress_done"] == steps[-1]["progress_total"] == 10


async def test_a_benchmark_under_an_slo_says_its_goodput_and_whether_each_level_met_it(
    tmp_path: Path,
) -> None:
    """Issue 53: an SLO (named in the settings, or inline) judges each level: goodput (the requests per
    second that met every per-request bound, vLLM's --goodput) equals a hand count of the stored requests;
    a level within every percentile bound met it, one past a bound says which. A bad SLO is refused
    before the run exists, naming the part."""
    slos = {"tight": "ttft_p95_ms=0.001,errors=0%", "loose": "ttft_p95_ms=60000,tpot_p95_ms=60000,errors=1%"}
    async with running_env(tmp_path, slos=slos) as env:
        await _activate(env, "baseline")
        for slo, words in (
            ("nope", "no SLO named 'nope' (the settings' [slos]: loose, tight)"),
            ("ttft_p95=800", "SLO part 'ttft_p95=800': no such bound"),
            ("ttft_p95_ms=-1", "the bound must be above 0 ms"),
            ("ttft p95", "String should match pattern"),
            ("ttft_p95_ms=0", "the bound must be above 0 ms"),
            ("errors=150%", "a share between 0 and 100%"),
        ):
            r = await _post(env, "/benchmarks", SPEC | {"slo": slo})
            assert r.status_code in (400, 422), (slo, r.text)
            assert words in r.text, (slo, r.text)
        assert not any(r["kind"] == "benchmark" for r in (await env.client.get("/runs")).json())
        digests = set()
        for name, met in (("loose", True), ("tight", False)):
            run_id = (await _post(env, "/benchmarks", SPEC | {"slo": name})).json()["run_id"]
            assert (await wait_run(env, run_id))["outcome"] == "ok"
            b = (await env.client.get(f"/benchmarks/{run_id}", params={"requests": True})).json()
            digests.add(b["spec_hash"])
            for lv in b["levels"]:
                s, rows = lv["summary"], lv["requests"]
                assert s["slo"] == slos[name]
                assert s["slo_met"] is met, s["slo_missed"]
                bound = 60000.0 if met else 0.001
                by_hand = sum(1 for q in rows if q["status"] == "ok" and q["ttft"] * 1000 <= bound)
                assert s["good_requests"] == by_hand
                assert s["request_goodput"] == by_hand / s["duration"]
            if not met:
                assert s["slo_missed"][0].startswith("p95_ttft_ms "), s["slo_missed"]
        assert len(digests) == 1  # an SLO judges the measurement: the benchmarks stay comparable


async def test_an_exported_run_imported_back_gives_the_same_figures_and_a_bad_file_names_its_field(
    env: Env,
) -> None:
    """Issue 53: k25-ctl's export is `vllm bench serve`'s result format; importing it (or one vLLM result
    object) stores a benchmark run labelled as imported, whose figures and export are the original's."""
    await _activate(env, "baseline")
    run_id = (await _post(env, "/benchmarks", SPEC)).json()["run_id"]
    await wait_run(env, run_id)
    exported = (await env.client.get(f"/benchmarks/{run_id}/export")).json()
    r = await _post(
        env, "/benchmark-imports", {"profile": "elsewhere", "label": "host b", "results": exported}
    )
    assert r.status_code == 201, r.text
    new = r.json()["run_id"]
    assert r.headers["Location"] == f"/benchmarks/{new}"
    run = (await env.client.get(f"/runs/{new}")).json()
    assert (run["kind"], run["outcome"]) == ("benchmark", "ok")
    assert any(e["detail"] == "imported from vllm bench serve: host b" for e in run["events"]), run["events"]
    b = (await env.client.get(f"/benchmarks/{new}")).json()
    assert b["provenance"]["imported"] == {"tool": "vllm bench serve", "label": "host b"}
    again = (await env.client.get(f"/benchmarks/{new}/export")).json()
    skip = {"date", "k25_run_id", "k25_profile", "model_id", "tokenizer_id"}
    for before, after in zip(exported, again, strict=True):
        assert {k: v for k, v in before.items() if k not in skip} == {
            k: v for k, v in after.items() if k not in skip
        }
    assert [lv["concurrency"] for lv in b["levels"]] == [1, 2]
    one = exported[0] | {"request_rate": "Infinity"}
    assert (
        await _post(env, "/benchmark-imports", {"profile": "elsewhere", "results": one})
    ).status_code == 201
    broken = {k: v for k, v in exported[0].items() if k != "output_throughput"}
    r = await _post(env, "/benchmark-imports", {"profile": "elsewhere", "results": [broken]})
    assert r.status_code == 422
    assert "output_throughput" in r.text
    assert "Field required" in r.text


async def test_the_kept_lists_and_comparison_follow_every_change(env: Env) -> None:
    """/benchmarks, /experiments and /compare are kept between changes (perf/history.py: a year's
    window judged on every page refresh cost 183 ms): each read while nothing changed is the same answer,
    and each change (a benchmark saved, an experiment's progress, its end) is in the next read."""

    async def lists() -> tuple[Any, Any, Any]:
        got = [await env.client.get(p) for p in ("/benchmarks", "/experiments", "/compare")]
        return tuple(g.json() for g in got)

    await _activate(env, "baseline")
    empty = await lists()
    assert (empty[0], empty[1], empty[2]["rows"]) == ([], [], [])
    spec = {"concurrency": [1], "num_prompts": 2, "max_tokens": 8, "warmups": 0}
    r = await _post(env, "/experiments", {"profiles": ["alpha", "beta"], "benchmark": spec})
    exp_id = r.json()["run_id"]
    listed = (await env.client.get("/experiments")).json()
    assert [(e["run_id"], e["outcome"]) for e in listed] == [(exp_id, "running")]
    await wait_run(env, exp_id)
    benches, exps, cmp = await lists()
    assert [(e["run_id"], e["outcome"], len(e["steps"])) for e in exps] == [(exp_id, "ok", 2)]
    assert sorted(b["profile"] for b in benches) == ["alpha", "beta"]
    assert {row["profile"] for row in cmp["rows"]} == {"alpha", "beta"}
    assert await lists() == (benches, exps, cmp)  # unchanged: the kept answers
    r = await _post(env, "/benchmarks", spec)
    await wait_run(env, r.json()["run_id"])
    after = await lists()
    assert len(after[0]) == 3
    assert after[0][0]["run_id"] == r.json()["run_id"]
    assert {row["profile"] for row in after[2]["rows"]} == {"alpha", "beta", "baseline"}


async def test_an_experiment_cancelled_as_its_switch_is_created_ends_that_switch(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulation's seed 2026, step 1658: an experiment cancelled while its first switch's run was being
    created (the run written, its task not yet started) left that run running for good, and the host with it.
    The switch now starts whatever befalls the experiment, which then cancels it as any switch it waits for."""
    await _activate(env, "baseline")
    created, release = asyncio.Event(), asyncio.Event()
    noticed = upgrades.notice_upgrade

    async def held(*args: Any) -> None:  # right after the switch's run is written
        created.set()
        await release.wait()
        await noticed(*args)

    monkeypatch.setattr(transaction, "notice_upgrade", held)
    r = await _post(env, "/experiments", {"profiles": ["alpha", "beta"], "benchmark": SPEC})
    assert r.status_code == 202, r.text
    experiment = r.json()["run_id"]
    await asyncio.wait_for(created.wait(), 30)
    assert (await env.client.post(f"/runs/{experiment}/cancel", headers=env.auth)).status_code == 202
    release.set()
    assert (await wait_run(env, experiment))["outcome"] == "cancelled"
    runs = (await env.client.get("/runs", params={"limit": 50})).json()
    running = [(r["kind"], r["profile"]) for r in runs if r["outcome"] == "running"]
    assert running == [("serving", "baseline")], running  # baseline's engine serves on, nothing else runs
    switch = next(r for r in runs if r["kind"] == "switch" and r["profile"] == "alpha")
    assert switch["outcome"] in ("cancelled", "active"), switch  # cancelled, or refused while it began
    st = (await env.client.get("/status")).json()
    assert (st["state"], st["active_profile"]) == ("active", "baseline")  # the experiment restored it
