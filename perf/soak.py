"""A soak: many switches round-robin over the sandbox's profiles with faults injected at random (crash while
loading, crash after ready, SIGTERM ignored, leaked shm, orphans, deadlock). At the end: runs stuck or lost,
engine processes and shm files left behind, and the daemon's RSS growth. Needs root.
`python perf/soak.py [--switches 200] [--seed 25]`"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from k25_sandbox.faults import inside, write_fault_profiles
from perf.watch import daemon_process

GOOD = ("baseline", "vllm-eagle3", "sglang-eagle3")
FAULTY = ("crashy", "late-crash", "stubborn", "leaky", "orphaner", "deadlocked")


def settle(c: httpx.Client, within_s: float = 180) -> Any:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        st = c.get("/status").json()
        if st["state"] != "switching":
            return st
        time.sleep(0.2)  # a bench polls; the daemon itself waits on events
    raise SystemExit("the host stayed switching")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--switches", type=int, default=200)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--fault-share", type=float, default=0.3)
    args = ap.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - a reproducible schedule, not a secret
    extra = Path(tempfile.mkdtemp(prefix="k25-soak-"))
    write_fault_profiles(extra / "profiles", extra / "models")
    info = sbx.up(load_seconds=0.3, profiles=extra / "profiles", binds=(extra / "models",))
    outcomes: dict[str, int] = {}
    try:
        c = httpx.Client(base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"})
        c.post("/profiles/baseline/activate", params={"wait": True})
        p = daemon_process(info)
        rss0 = p.memory_info().rss
        began = time.monotonic()
        for i in range(args.switches):
            name = rng.choice(FAULTY) if rng.random() < args.fault_share else GOOD[i % len(GOOD)]
            settle(c)
            r = c.post(f"/profiles/{name}/activate", params={"wait": True, "force": True})
            key = f"{r.status_code} {r.json().get('outcome', r.json().get('detail', ''))[:40]}"
            outcomes[key] = outcomes.get(key, 0) + 1
            if name == "late-crash" and r.status_code == 200 and r.json().get("outcome") == "active":
                port = c.get(f"/profiles/{name}").json()["port"]
                with httpx.Client(timeout=30) as e:  # its second request makes it crash: the watch acts
                    e.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x", "max_tokens": 2})
        st = settle(c)
        took = time.monotonic() - began
        runs = c.get("/runs", params={"limit": 1000}).json()
        stuck = [r["id"] for r in runs if r["outcome"] == "running" and r["kind"] != "serving"]
        serving = [r["id"] for r in runs if r["outcome"] == "running" and r["kind"] == "serving"]
        active_unit = next(
            (u["unit"] for u in st["units"].values() if u.get("active_state") == "active"), None
        )
        ps = inside(info, "ps", "-eo", "pid,cgroup:200,args", "--no-headers").stdout.splitlines()
        leaked = [line for line in ps if ("VLLM::" in line or "sglang::" in line)
                  and (active_unit is None or active_unit not in line)]  # fmt: skip
        shm = inside(info, "sh", "-c", "ls /dev/shm").stdout.split()
        engine_shm = [f for f in shm if f.startswith(("psm_", "sgl_shm_", "nccl-", "sem.mp-"))]
        rss1 = p.memory_info().rss
        print(f"{args.switches} switches in {took:.0f}s ({args.fault_share:.0%} faulty, seed {args.seed})")
        for key, n in sorted(outcomes.items()):
            print(f"  {n:4d} x {key}")
        print(f"final state {st['state']} ({st['active_profile']}); runs stuck running: {len(stuck)} {stuck[:10]}; "
              f"open serving runs: {len(serving)}")  # fmt: skip
        print(f"engine processes outside the active unit: {len(leaked)}; engine shm files: {len(engine_shm)} "
              f"(held by the active engine: its own)")  # fmt: skip
        print(
            f"daemon RSS {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB (growth {(rss1 - rss0) / 2**20:+.1f} MiB)"
        )
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
