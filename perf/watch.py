"""What the serving watch costs: two sandboxes side by side, baseline active in both, one with the watch at
its default interval (10 s) and one with it off; over the same window (default 5 minutes) each daemon's CPU
time (as % of one core) and RSS. Target: the watch costs at most 0.5% of a core. Needs root.
`python perf/watch.py [--seconds 300]`"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx


def daemon_process(info: sbx.SandboxInfo) -> psutil.Process:
    """The sandbox's `k25-ctl serve`, seen from this PID namespace."""
    for p in psutil.Process(info.pid).children(recursive=True):
        cmd = " ".join(p.cmdline())
        if cmd.endswith(" serve") and ("k25-ctl" in cmd or "daemon.cli" in cmd):
            return p
    raise SystemExit(f"no daemon found in sandbox {info.name}")


def cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=300.0)
    args = ap.parse_args()
    modes = {"watch on": {"watch_interval_s": "10"}, "watch off": {"watch_enabled": "false"}}
    boxes = {name: sbx.up(load_seconds=1.0, settings=s) for name, s in modes.items()}
    try:
        for info in boxes.values():
            with httpx.Client(base_url=info.url, timeout=120,
                              headers={"Authorization": f"Bearer {info.token}"}) as c:  # fmt: skip
                run = c.post("/profiles/baseline/activate", params={"wait": True}).json()
                assert run["outcome"] == "active", run
        procs = {name: daemon_process(info) for name, info in boxes.items()}
        time.sleep(5)  # let the activation's own work settle before the window starts
        began = {name: cpu_s(p) for name, p in procs.items()}
        t0 = time.monotonic()
        time.sleep(args.seconds)  # the measurement window itself
        wall = time.monotonic() - t0
        pct = {name: 100 * (cpu_s(p) - began[name]) / wall for name, p in procs.items()}
        for name, p in procs.items():
            print(
                f"{name:10} CPU {pct[name]:.3f}% of a core over {wall:.0f}s, RSS {p.memory_info().rss / 2**20:.1f} MiB"
            )
        cost = pct["watch on"] - pct["watch off"]
        print(f"the watch costs {cost:.3f}% of a core (target <= 0.5%)")
    finally:
        for info in boxes.values():
            sbx.down(info)


if __name__ == "__main__":
    main()
