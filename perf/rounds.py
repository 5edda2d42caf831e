"""What interleaved rounds cost, in one sandbox run: two parkable profiles (the fake vLLM, a cold start of
--load-seconds each), an experiment of both with --rounds 1, everything parked stopped, then the same
experiment with --rounds N. With parking every switch after the first round is a wake, so N rounds cost
little more than one (#37: <= 1.3x at 4 rounds). Prints each experiment's total time, its switches (cold
or woken), the ratio, and the verdict each reached. The default proportion of a cold start to a benchmark
(30 s to ~1.6 s: 8 requests of 64 tokens, 4 at a time, at 82.5 tok/s) is production's (25 minutes to one
or two); the ratio grows as the benchmark's share does. Needs root (the sandbox).
`python perf/rounds.py [--load-seconds 30] [--rounds 4] [--prompts 8]`"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port


def _experiment(c: httpx.Client, rounds: int, prompts: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """From vllm-eagle3 with nothing parked: the experiment's run and its result."""
    r = c.post("/profiles/vllm-eagle3/activate", params={"wait": True}).json()
    assert r.get("outcome") == "active" or r.get("detail") == "already active", r
    for p in c.get("/status").json()["parked"]:
        assert c.post(f"/profiles/{p['profile']}/unpark").status_code == 200
    bench = {"concurrency": [4], "num_prompts": prompts, "max_tokens": 64, "warmups": 0}
    body = {"profiles": ["a", "b"], "rounds": rounds, "benchmark": bench}
    run_id = c.post("/experiments", json=body).json()["run_id"]
    with c.stream("GET", f"/runs/{run_id}/events") as events:  # the run's own events, until its final one
        for line in events.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("final"):
                break
    return c.get(f"/runs/{run_id}").json(), c.get(f"/experiments/{run_id}").json()


def _seconds(run: dict[str, Any]) -> float:
    return (
        datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
    ).total_seconds()


def _switches(c: httpx.Client, exp: dict[str, Any]) -> str:
    out = []
    for s in exp["steps"]:
        if s["switch_run_id"] is not None:
            stages = c.get(f"/runs/{s['switch_run_id']}").json()["load_stages"] or {}
            out.append(f"{s['profile']} {'woken' if 'wake' in stages else 'cold'}")
    return ", ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--load-seconds", type=float, default=30.0, help="each profile's cold start")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=8, help="requests a benchmark")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="k25-rounds-") as tmp:
        extra, models = Path(tmp, "profiles"), Path(tmp, "models")
        extra.mkdir()
        make_models(models)
        for name in ("a", "b"):
            text = fake_engine_profile(name, flavor="vllm", port=free_port(), models=models, rate=82.5,
                                       load_seconds=args.load_seconds, park="sleep", wake_gbps=100.0)  # fmt: skip
            (extra / f"{name}.toml").write_text(text)
        info = sbx.up(profiles=extra, load_seconds=1.0, binds=(models,))
        try:
            c = httpx.Client(
                base_url=info.url, timeout=600, headers={"Authorization": f"Bearer {info.token}"}
            )
            results = {n: _experiment(c, n, args.prompts) for n in (1, args.rounds)}
            switches = {n: _switches(c, exp) for n, (_, exp) in results.items()}
        finally:
            sbx.down(info)
    print(f"two parkable profiles, cold start {args.load_seconds:g}s, {args.prompts} requests a benchmark:")
    for n, (run, exp) in results.items():
        verdict = "; ".join(exp["verdicts"]) or "-"
        print(f"--rounds {n}: {_seconds(run):7.1f}s  switches: {switches[n]}  verdict: {verdict}")
    one, many = (_seconds(results[n][0]) for n in (1, args.rounds))
    print(f"ratio rounds {args.rounds} / rounds 1: {many / one:.3f} (target <= 1.3)")


if __name__ == "__main__":
    main()
