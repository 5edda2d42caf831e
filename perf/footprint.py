"""The daemon's idle footprint with production settings (watch every 10 s, GPU sampler every 5 s): CPU as %
of one core and RSS over a window (default 5 minutes), baseline active. Target: idle CPU <= 0.3% of a core.
Needs root. `python perf/footprint.py [--seconds 300]`"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.sandbox import sandbox as sbx
from perf.watch import cpu_s, daemon_process

PRODUCTION = {"watch_interval_s": "10", "stall_s": "120", "restart_backoff_s": "5"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=300.0)
    args = ap.parse_args()
    info = sbx.up(load_seconds=1.0, settings=PRODUCTION)
    try:
        auth = {"Authorization": f"Bearer {info.token}"}
        httpx.post(f"{info.url}/profiles/baseline/activate", params={"wait": True}, headers=auth, timeout=120)
        p = daemon_process(info)
        time.sleep(5)  # the activation's own work settles first
        rss0, cpu0, t0 = p.memory_info().rss, cpu_s(p), time.monotonic()
        time.sleep(args.seconds)  # the measurement window
        wall = time.monotonic() - t0
        cpu = 100 * (cpu_s(p) - cpu0) / wall
        rss1 = p.memory_info().rss
        print(f"idle daemon over {wall:.0f}s: CPU {cpu:.3f}% of a core (target <= 0.3%), "
              f"RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB")  # fmt: skip
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
