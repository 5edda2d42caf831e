"""The capacity search's cost (issue 53): its wall time against the number of steps it takes, at several
resolutions, in a sandbox: a fake vLLM that batches (50 tok/s, knee 4, 16 tokens a request), whose
capacity under tpot_mean_ms=50 is 7.5 req/s (Little's law: tests/system/test_capacity.py). Each row: the
resolution asked, the steps taken, the bracket found, the wall time and the time per step (a step's
requests arrive over num_prompts / rate seconds: low rates cost the most). Needs root (the sandbox).
`python perf/capacity.py [--requests 30] [--resolutions 0.4,0.2,0.1,0.05]`"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port

KNOWN = 7.5


def _search(c: httpx.Client, resolution: float, requests: int) -> tuple[dict[str, Any], float]:
    body = {
        "num_prompts": requests,
        "max_tokens": 16,
        "warmups": 1,
        "slo": "tpot_mean_ms=50",
        "capacity": {"start_rate": 2.0, "resolution": resolution},
    }
    began = time.monotonic()
    run_id = c.post("/benchmarks", json=body).json()["run_id"]
    while c.get(f"/runs/{run_id}").json()["outcome"] == "running":
        with c.stream("GET", f"/runs/{run_id}/events") as events:  # closes after the run's last event
            for _ in events.iter_bytes():
                pass
    seconds = time.monotonic() - began
    return c.get(f"/benchmarks/{run_id}").json(), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=30, help="measured requests per step")
    ap.add_argument("--resolutions", default="0.4,0.2,0.1,0.05")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="k25-capacity-") as tmp:
        extra, models = Path(tmp, "profiles"), Path(tmp, "models")
        extra.mkdir()
        make_models(models)
        text = fake_engine_profile(
            "batchy", flavor="vllm", port=free_port(), models=models, load_seconds=0.5, rate=50.0,
            engine_args=("--batch-knee", "4"),
        )  # fmt: skip
        (extra / "batchy.toml").write_text(text)
        info = sbx.up(profiles=extra, load_seconds=0.5, binds=(models,))
        try:
            c = httpx.Client(
                base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"}
            )
            c.post("/profiles/batchy/activate", params={"wait": True})
            print(f"known capacity {KNOWN} req/s; {args.requests} requests a step")
            print(f"{'resolution':>10} {'steps':>5} {'capacity':>9} {'missed at':>9} {'estimate':>8} "
                  f"{'wall s':>7} {'s/step':>7}")  # fmt: skip
            for res in (float(x) for x in args.resolutions.split(",")):
                b, seconds = _search(c, res, args.requests)
                found, steps = b["capacity"], len(b["levels"])
                print(
                    f"{res:>10.2f} {steps:>5} {found['capacity'] or 0:>9.2f} {found['lowest_missed'] or 0:>9.2f} "
                    f"{found['estimate'] or 0:>8.2f} {seconds:>7.1f} {seconds / steps:>7.1f}"
                )
        finally:
            sbx.down(info)


if __name__ == "__main__":
    main()
