"""Switch overhead in the sandbox: for baseline -> vllm-eagle3 -> sglang-eagle3 -> baseline, the time of
each phase (from the run's persisted events) and the overhead = total - engine load time, i.e. what k25-ctl
adds around the engine's own start. Needs root (boots a sandbox). `python perf/switch.py [--load-seconds S]`"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx

PHASES = ("stop", "teardown", "start", "loading", "probing")


def phase_times(run: dict[str, Any]) -> dict[str, float]:
    """Seconds from each phase's first event to the next phase's first event."""
    firsts: list[tuple[str, datetime]] = []
    for e in run["events"]:
        if not firsts or firsts[-1][0] != e["phase"]:
            if e["phase"] not in [p for p, _ in firsts]:
                firsts.append((e["phase"], datetime.fromisoformat(e["at"])))
    start = datetime.fromisoformat(run["started_at"])
    out, prev = {}, start
    marks = [*firsts[1:], ("end", datetime.fromisoformat(run["ended_at"]))]
    for (phase, at), (_, nxt) in zip(firsts, marks, strict=False):
        out[phase] = (nxt - at).total_seconds()
        prev = nxt
    out["total"] = (prev - start).total_seconds()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--load-seconds", type=float, default=2.0)
    args = ap.parse_args()
    info = sbx.up(load_seconds=args.load_seconds)
    try:
        client = httpx.Client(
            base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"}
        )
        print(
            f"{'profile':15} {'total':>7} {'load':>7} {'overhead':>9}  "
            + "  ".join(f"{p:>9}" for p in PHASES)
        )
        for name in ("baseline", "vllm-eagle3", "sglang-eagle3", "baseline"):
            run = client.post(f"/profiles/{name}/activate", params={"wait": True, "force": True}).json()
            if run["outcome"] != "active":
                raise SystemExit(f"{name}: {run['outcome']}: {run['error']}")
            t = phase_times(run)
            overhead = t["total"] - run["load_seconds"]
            cols = "  ".join(f"{t.get(p, 0.0):9.3f}" for p in PHASES)
            print(f"{name:15} {t['total']:7.3f} {run['load_seconds']:7.3f} {overhead:9.3f}  {cols}")
        print("overhead = total - load seconds (load: unit start to the engine's HTTP up); times in seconds")
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
