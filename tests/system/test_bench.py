"""Benchmarks and experiments against fake engines in the sandbox, at the deployment's known rates:
baseline 82.5 tok/s, vllm-eagle3 0.66x at 15% acceptance, sglang-eagle3 1.8x at accept length 2.8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from k25_sandbox.fake_install import DEFAULT_VERSIONS
from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api

SPEC = {"concurrency": [1], "num_prompts": 3, "max_tokens": 64, "warmups": 1}
# The comparison's: each benchmark 4-10 s, so that a stall of this busy machine (a real vLLM starting on
# another worker) is a small part of it. With SPEC (1.3 s for sglang-eagle3), one stall put 50% between
# its two repeats: 1.52x read for 1.8x, and a noise band wide enough to blur the verdicts.
COMPARED = SPEC | {"max_tokens": 192}


def _start(api: Api, path: str, body: dict[str, Any]) -> int:
    r = api.client.post(path, json=body)
    assert r.status_code == 202, r.text
    assert r.headers["Location"].endswith(str(r.json()["run_id"]))
    run_id: int = r.json()["run_id"]
    return run_id


def test_an_experiment_compares_the_three_profiles_and_restores(api: Api) -> None:
    api.activate("baseline")
    # crashy fails while loading: recorded, rolled back, and the experiment goes on.
    body = {
        "profiles": ["baseline", "vllm-eagle3", "crashy", "sglang-eagle3"],
        "benchmark": COMPARED,
        "repeats": 2,
    }
    exp_id = _start(api, "/experiments", body)
    run = api.wait_run(exp_id, within_s=240)
    exp = api.client.get(f"/experiments/{exp_id}").json()
    assert run["outcome"] == "ok", exp
    steps = {s["profile"]: s for s in exp["steps"]}
    assert steps["crashy"]["error"]
    assert "failed" in steps["crashy"]["error"]
    assert steps["crashy"]["benchmark_run_ids"] == []
    for name in ("baseline", "vllm-eagle3", "sglang-eagle3"):
        assert steps[name]["outcomes"] == ["ok", "ok"], steps[name]
    assert exp["restore"]["ok"] is True
    assert exp["restore"]["profile"] == "baseline"
    # While one profile is measured, the next one's weights are read into the page cache.
    events = [e["detail"] for e in api.run(exp_id)["events"] if e["phase"] == "warming"]
    assert any(d.startswith("warming vllm-eagle3 (run ") for d in events), events
    st = api.status()
    assert (st["state"], st["active_profile"], st["job"]) == ("active", "baseline", None)

    cmp = api.client.get("/compare", params={"baseline": "baseline"}).json()
    rows = {r["profile"]: r for r in cmp["rows"]}
    print({n: (r["output_throughput"], r["speedup"], r["noise"], r["verdict"]) for n, r in rows.items()})
    assert set(rows) == {"baseline", "vllm-eagle3", "sglang-eagle3"}
    assert rows["baseline"]["verdict"] == "baseline"
    # Each engine's pace as the benchmark measured it, and the speed-ups as the ratio of the throughputs.
    rates = {name: api.stream_rate(row["run_ids"]) for name, row in rows.items()}
    print("per-request rates", rates)
    assert rates["baseline"] == pytest.approx(82.5, rel=0.05)
    assert rates["vllm-eagle3"] == pytest.approx(54.6, rel=0.05)
    assert rates["sglang-eagle3"] == pytest.approx(1.8 * 82.5, rel=0.05)
    for row in rows.values():
        ratio = row["output_throughput"] / rows["baseline"]["output_throughput"]
        assert row["speedup"] == pytest.approx(ratio, rel=1e-9)
    assert rows["vllm-eagle3"]["acceptance_rate"] == pytest.approx(0.15, abs=0.005)
    assert rows["sglang-eagle3"]["acceptance_length"] == pytest.approx(2.8, rel=0.02)
    assert (rows["vllm-eagle3"]["verdict"], rows["sglang-eagle3"]["verdict"]) == ("slower", "faster")
    assert rows["vllm-eagle3"]["repeats"] == 2
    assert rows["vllm-eagle3"]["noise_assumed"] is False
    assert not any(r["other_traffic"] for r in rows.values())

    # Provenance: each number traces to its run, the serving run's argv and the engine's version.
    bench = api.client.get(
        f"/benchmarks/{rows['sglang-eagle3']['run_ids'][0]}", params={"requests": True}
    ).json()
    prov = bench["provenance"]
    assert (prov["engine"], prov["engine_version"], prov["profile"]) == (
        "sglang",
        DEFAULT_VERSIONS["sglang"],
        "sglang-eagle3",
    )
    assert prov["drafter"].endswith("Kimi-K2.5-EAGLE3")
    assert prov["gpu_names"][0] == "Simulated H200"
    assert "--spec-tokens" in prov["argv"]
    assert prov["profile_sha256"]
    level = bench["levels"][0]
    assert len(level["requests"]) == 3
    assert all(r["status"] == "ok" for r in level["requests"])
    assert level["summary"]["spec_decode_acceptance_length"] == pytest.approx(2.8, rel=0.02)
    vllm_bench = api.client.get(f"/benchmarks/{rows['vllm-eagle3']['run_ids'][0]}/export").json()
    assert vllm_bench[0]["spec_decode_acceptance_rate"] == pytest.approx(15.0, abs=0.5)  # vLLM: percent
    for key in ("duration", "completed", "failed", "output_throughput", "mean_ttft_ms", "p99_itl_ms",
                "spec_decode_num_drafts", "spec_decode_per_position_acceptance_rates"):  # fmt: skip
        assert key in vllm_bench[0], key


def test_cancel_stops_an_experiment_mid_benchmark_and_restores(api: Api) -> None:
    api.activate("baseline")
    body = {"profiles": ["vllm-eagle3"], "benchmark": SPEC | {"num_prompts": 50}, "repeats": 1}
    exp_id = _start(api, "/experiments", body)
    st = api.wait_until(
        lambda: "benchmark run" in (api.status().get("job") or "") and api.status(), what="measuring"
    )
    # While it runs, operators' switches and other jobs wait with a clear answer.
    busy = api.client.post("/profiles/sglang-eagle3/activate")
    assert busy.status_code == 409
    assert f"experiment run {exp_id}" in busy.json()["detail"]
    assert api.client.post("/benchmarks", json=SPEC).status_code == 409
    assert st["job_run_id"] == exp_id
    assert api.client.post(f"/runs/{exp_id}/cancel").status_code == 202
    run = api.wait_run(exp_id, within_s=120)
    assert run["outcome"] == "cancelled"
    exp = api.client.get(f"/experiments/{exp_id}").json()
    (bid,) = exp["steps"][0]["benchmark_run_ids"]
    bench = api.client.get(f"/benchmarks/{bid}").json()
    assert bench["outcome"] == "cancelled"
    assert exp["restore"]["ok"] is True
    st = api.status()
    assert (st["state"], st["active_profile"], st["job"]) == ("active", "baseline", None)


def test_a_benchmark_of_the_active_profile(api: Api) -> None:
    api.activate("vllm-eagle3")
    refused = api.client.post("/benchmarks", json=SPEC | {"profile": "baseline"})
    assert refused.status_code == 409
    assert "not active" in refused.json()["detail"]
    bad = api.client.post("/benchmarks", json=SPEC | {"concurrency": [0]})
    assert bad.status_code == 422
    # 16 requests: four rounds of four at the second level (~4.7 s), so that a stall of this busy machine
    # (a real vLLM starting beside it) must take 15% of that to move the ratio out of its band.
    run_id = _start(api, "/benchmarks", SPEC | {"concurrency": [1, 4], "num_prompts": 16, "endpoint": "chat"})
    run = api.wait_run(run_id, within_s=120)
    assert (run["kind"], run["profile"], run["outcome"]) == ("benchmark", "vllm-eagle3", "ok")
    bench = api.client.get(f"/benchmarks/{run_id}").json()
    one, four = (lv["summary"] for lv in bench["levels"])
    assert (one["max_concurrency"], four["max_concurrency"]) == (1, 4)
    # Four streams at once: four times the throughput of one (the fake engine serves each at its rate).
    assert four["output_throughput"] / one["output_throughput"] == pytest.approx(4.0, rel=0.15)
    assert one["mean_decode_tok_s"] == pytest.approx(54.6, rel=0.05)
    assert one["tokens_from_chunks"] == 0
    assert one["itl_per_token_split"] is False
    # vLLM's ITL is per chunk (~ TPOT x acceptance length); per token it is TPOT again.
    assert one["mean_itl_ms"] == pytest.approx(one["mean_tpot_ms"] * one["acceptance_length"], rel=0.1)
    assert one["mean_itl_per_token_ms"] == pytest.approx(one["mean_tpot_ms"], rel=0.1)
    api.activate("baseline")


def test_other_traffic_during_a_level_is_reported(api: Api, sandbox: SandboxInfo) -> None:
    import threading

    import httpx

    api.activate("baseline")
    run_id = _start(api, "/benchmarks", SPEC | {"num_prompts": 6, "warmups": 0})
    api.wait_until(lambda: "requests" in (api.status().get("job") or ""), what="measuring")
    # Someone else uses the engine while the level runs: two requests of 40 tokens straight to its port.
    url = f"http://127.0.0.1:{sandbox.engine_ports['baseline']}/v1/completions"
    body = {"model": "kimi-k2.5", "prompt": "hi", "max_tokens": 40}
    threads = [
        threading.Thread(target=httpx.post, args=(url,), kwargs={"json": body, "timeout": 30})
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert api.wait_run(run_id)["outcome"] == "ok"
    s = api.client.get(f"/benchmarks/{run_id}").json()["levels"][0]["summary"]
    assert s["other_traffic"] is True
    assert s["other_traffic_tokens"] == 80
    assert s["engine_generation_tokens"] == s["total_output_tokens"] + 80


def test_cli_bench_wait_and_compare(api: Api, sandbox: SandboxInfo, tmp_path: Path) -> None:
    from tests.system.test_api_cli import _cli

    api.activate("baseline")
    out = _cli(sandbox, "bench", "--requests", "3", "--max-tokens", "32", "--concurrency", "1,2", "--wait")
    assert out.returncode == 0, out.stderr
    assert "level 1/2: concurrency 1" in out.stdout
    assert "(3/3)" in out.stdout
    assert out.stdout.strip().splitlines()[-1].endswith(": ok")
    busy = _cli(sandbox, "bench", "sglang-eagle3")
    assert busy.returncode == 4
    assert "not active" in busy.stderr
    table = _cli(sandbox, "compare")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split()[:3] == ["profile", "tok/s", "±%"]
    assert any(
        line.startswith("baseline ") and "baseline" in line.split()[3:5] for line in table.stdout.splitlines()
    )
    listed = json.loads(_cli(sandbox, "benchmarks", "--json").stdout)
    export = json.loads(_cli(sandbox, "benchmark", str(listed[0]["run_id"]), "--export").stdout)
    assert [lv["max_concurrency"] for lv in export] == [1, 2]
    # Issue 53: the export read back by the import, as another tool's figures labelled as imported.
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps(export))
    imported = _cli(sandbox, "import-benchmark", str(saved), "--as", "other-host", "--label", "b07")
    assert imported.returncode == 0, imported.stderr
    new = int(imported.stdout.split()[4])
    again = api.client.get(f"/benchmarks/{new}/export").json()
    assert [lv["output_throughput"] for lv in again] == [lv["output_throughput"] for lv in export]
    saved.write_text(json.dumps([{"duration": 1.0}]))
    refused = _cli(sandbox, "import-benchmark", str(saved), "--as", "other-host")
    assert refused.returncode != 0
    assert "completed" in refused.stderr  # the first field the file lacks


def test_an_experiment_until_decided_stops_at_the_round_that_decides(api: Api) -> None:
    """Issue 53: baseline against vllm-eagle3 (the fake's speculation is a plain difference) in up to 8
    interleaved rounds with an early stop: it stops after a round where the group-sequential test decides
    every level, says so on the run, judges what it measured and restores."""
    api.activate("baseline")
    body = {
        "profiles": ["baseline", "vllm-eagle3"],
        "benchmark": COMPARED,
        "rounds": 8,
        "until_decided": True,
    }
    exp_id = _start(api, "/experiments", body)
    run = api.wait_run(exp_id, within_s=240)
    exp = api.client.get(f"/experiments/{exp_id}").json()
    assert run["outcome"] == "ok", exp
    said = [e["detail"] for e in run["events"] if e["detail"].startswith("stopping early: decided after ")]
    assert said, [e["detail"] for e in run["events"]]
    rounds = int(said[0].split()[4])
    assert 2 <= rounds < 8
    assert len(exp["steps"]) == 2 * rounds  # no round after the one that decided
    assert exp["restore"]["ok"] is True
    print(said[0])
