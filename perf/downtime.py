"""What clients see of a switch behind a load balancer: Debian's HAProxy in front of two sandbox hosts
(health-checking /ready every second, fall 2, rise 1), 8 requests kept in flight through it, host A
switched away and back twice in one run: once with the drain, once with `drain=false`. For each: requests
failed, p50/p99 latency of those sent during the switch, and what A's switch runs recorded (downtime,
requests cut). Needs root and haproxy (scripts/setup.sh). `python perf/downtime.py [--clients 8]`"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from k25_sandbox.balancer import Answer, Haproxy, Host, Load, haproxy
from k25_sandbox.ports import free_port


def _client(info: sbx.SandboxInfo) -> httpx.Client:
    return httpx.Client(base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"})


def _activate(c: httpx.Client, name: str, drain: bool) -> dict[str, Any]:
    run: dict[str, Any] = c.post(f"/profiles/{name}/activate", params={"wait": True, "drain": drain}).json()
    return run


def _until_serving(proxy: Haproxy, name: str, within_s: float = 60, *, traffic: bool = True) -> None:
    """Until HAProxy has `name` UP (and, with traffic flowing, sends it requests again)."""
    served = proxy.served(name) if traffic else -5
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proxy.serves_again(name, served):
            return
        time.sleep(0.2)
    raise SystemExit(f"{name} did not come back into rotation")


def _pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1] if len(xs) >= 2 else (xs or [0.0])[0]


def _round(c: httpx.Client, proxy: Haproxy, load: Load, drain: bool) -> dict[str, Any]:
    began, first = time.monotonic(), load.count()
    runs = [_activate(c, "vllm-eagle3", drain)]
    _until_serving(proxy, "a")
    runs.append(_activate(c, "baseline", drain))
    _until_serving(proxy, "a")
    ended = time.monotonic()
    answers: list[Answer] = [a for a in load.answers[first:] if began <= a.sent <= ended]
    ms = [a.seconds * 1000 for a in answers]
    return {
        "requests": len(answers),
        "failed": sum(not a.ok for a in answers),
        "p50_ms": _pct(ms, 50),
        "p99_ms": _pct(ms, 99),
        "downtime_s": [r["switch_cost"]["downtime_s"] for r in runs],
        "cut": [r["switch_cost"]["drain_cut"] for r in runs],
        "outcomes": [r["outcome"] for r in runs],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64, help="per request (the baseline makes 82.5 tok/s)")
    args = ap.parse_args()
    hosts = []
    try:
        for _ in range(2):
            port = free_port()
            settings = {"service_port": str(port), "drain_grace_s": "3.5", "drain_poll_s": "0.1"}
            hosts.append((sbx.up(load_seconds=1.0, settings=settings), port))
        (a, a_port), (b, b_port) = hosts
        for info, _ in hosts:
            assert _activate(_client(info), "baseline", True)["outcome"] == "active"
        with haproxy([Host("a", a_port, a.port), Host("b", b_port, b.port)], free_port()) as proxy:
            _until_serving(proxy, "a", 60, traffic=False)
            _until_serving(proxy, "b", 60, traffic=False)
            with Load(proxy.url, clients=args.clients, max_tokens=args.max_tokens) as load:
                results = {"drain": _round(_client(a), proxy, load, True)}
                results["no drain"] = _round(_client(a), proxy, load, False)
        print(f"{args.clients} requests in flight through HAProxy, {args.max_tokens} tokens each; host A "
              "switched to vllm-eagle3 and back")  # fmt: skip
        print(f"{'':10} {'requests':>8} {'failed':>6} {'p50 ms':>8} {'p99 ms':>9}  downtime s      cut")
        for name, r in results.items():
            downtime = "/".join(f"{d:.1f}" for d in r["downtime_s"])
            print(f"{name:10} {r['requests']:>8} {r['failed']:>6} {r['p50_ms']:>8.0f} {r['p99_ms']:>9.0f}  "
                  f"{downtime:14} {'/'.join(map(str, r['cut']))}")  # fmt: skip
    finally:
        for info, _ in hosts:
            sbx.down(info)


if __name__ == "__main__":
    main()
