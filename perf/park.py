"""The way back after an experiment, with and without parking, in one sandbox run: two otherwise equal
production profiles (the fake vLLM, a cold start of --load-seconds), one with `park = "sleep"`; for each,
an experiment from it to vllm-eagle3 and back. Prints each restore's total time (drain, stop, teardown,
then the start or the wake, the probe) and its ready time (from the start or wake to active), and the
ratios, and the known-answer check's seconds beside the wake's. Needs root (the sandbox). `python perf/park.py [--load-seconds 20] [--wake-gbps 25]`; `--costs`: the park cost table instead
(perf/park_costs.py)."""

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

BENCH = {"concurrency": [1], "num_prompts": 2, "max_tokens": 16}


def _restore(c: httpx.Client, name: str) -> dict[str, Any]:
    """Activate `name`, run an experiment to vllm-eagle3 and back: the restore's run."""
    r = c.post(f"/profiles/{name}/activate", params={"wait": True, "force": True}).json()
    assert r["outcome"] == "active", r
    exp = c.post("/experiments", json={"profiles": ["vllm-eagle3"], "benchmark": BENCH}).json()["run_id"]
    with c.stream("GET", f"/runs/{exp}/events") as events:  # the run's own events, until its final one
        for line in events.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("final"):
                break
    restore = c.get(f"/experiments/{exp}").json()["restore"]
    assert restore["ok"], restore
    run: dict[str, Any] = c.get(f"/runs/{restore['switch_run_id']}").json()
    return run


def _seconds(run: dict[str, Any], first: str | None = None) -> float:
    at = datetime.fromisoformat
    began = (
        at(run["started_at"])
        if first is None
        else next(at(e["at"]) for e in run["events"] if e["phase"] == first)
    )
    return (at(run["ended_at"]) - began).total_seconds()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--load-seconds", type=float, default=20.0, help="the production profile's cold start")
    ap.add_argument("--wake-gbps", type=float, default=25.0, help="weights back from host RAM (68 GiB)")
    ap.add_argument("--costs", action="store_true", help="the park cost table, predicted beside measured")
    args = ap.parse_args()
    if args.costs:
        from perf.park_costs import costs

        return costs()
    with tempfile.TemporaryDirectory(prefix="k25-park-") as tmp:
        extra, models = Path(tmp, "profiles"), Path(tmp, "models")
        extra.mkdir()
        make_models(models)
        for name, park in (("plain", None), ("parks", "sleep")):
            text = fake_engine_profile(name, flavor="vllm", port=free_port(), models=models, rate=82.5,
                                       load_seconds=args.load_seconds, park=park, wake_gbps=args.wake_gbps)  # fmt: skip
            (extra / f"{name}.toml").write_text(text)
        info = sbx.up(profiles=extra, load_seconds=1.0, binds=(models,))
        try:
            c = httpx.Client(
                base_url=info.url, timeout=600, headers={"Authorization": f"Bearer {info.token}"}
            )
            runs = {name: _restore(c, name) for name in ("plain", "parks")}
        finally:
            sbx.down(info)
    total = {n: _seconds(r) for n, r in runs.items()}
    ready = {"plain": _seconds(runs["plain"], "start"), "parks": _seconds(runs["parks"], "waking")}
    print(
        f"restore after an experiment (cold start {args.load_seconds:g}s, wake at {args.wake_gbps:g} GB/s):"
    )
    print(f"{'':22} {'total s':>8} {'ready s':>8}  stages")
    for name, label in (("plain", "stop + cold start"), ("parks", "park + wake")):
        stages = ", ".join(f"{k} {v:.2f}s" for k, v in (runs[name]["load_stages"] or {}).items())
        print(f"{label:22} {total[name]:>8.2f} {ready[name]:>8.2f}  {stages}")
    print(
        f"ratio park/cold: total {total['parks'] / total['plain']:.3f}, ready {ready['parks'] / ready['plain']:.3f}"
    )
    woke = runs["parks"]["load_stages"] or {}
    check, wake = woke.get("known_answer"), woke.get("wake")
    if check is None or wake is None:
        sys.exit(f"the wake recorded no wake or known_answer stage: {woke}")
    print(
        f"known-answer check after the wake: {check:.2f}s beside the wake's {wake:.2f}s "
        f"(ratio {check / wake:.2f}; target <= 0.5 s at 82 tok/s single-stream)"
    )


if __name__ == "__main__":
    main()
