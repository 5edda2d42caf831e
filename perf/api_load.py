"""Reads under load, against the daemon in a sandbox with the baseline active (the serving watch running):
three rounds of GET /status at a fixed 200 requests/s for 30 s while 100 clients hold /events open, each
with p50/p99/max, the daemon's CPU, and the slowest event-loop callbacks the daemon logged meanwhile
(`slow_callback_ms`: each event-loop step over it, named; a regression names its cause); then GET /metrics over a runs
table of 100k rows (p50/p99). Targets: /status p99 <= 10 ms, /metrics p99 <= 20 ms. Needs root.
`python perf/api_load.py [--rounds 3] [--slow-ms 20] [--no-debug]`"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


async def status_load(
    url: str, rate: float, seconds: float, streams: int, connections: int = 64
) -> list[float]:
    """Open loop: requests leave on schedule over `connections` keep-alive connections whatever the answers
    do, while `streams` clients hold /events open. Raw asyncio HTTP/1.1, so that on a small machine what is
    measured is the daemon, not a heavy client sharing its cores."""
    host, port = url.removeprefix("http://").split(":")
    head = f"Host: {host}:{port}\r\n\r\n".encode()

    async def hold(opened: list[int], ready: asyncio.Event) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /events HTTP/1.1\r\n" + head)
        await reader.readuntil(b"\r\n\r\n")
        opened.append(1)
        if len(opened) == streams:
            ready.set()
        while await reader.read(65536):
            pass

    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(connections):
        pool.put_nowait(await asyncio.open_connection(host, int(port)))
    opened: list[int] = []
    ready = asyncio.Event()
    holders = [asyncio.create_task(hold(opened, ready)) for _ in range(streams)]
    await asyncio.wait_for(ready.wait(), 60)
    latencies: list[float] = []

    async def one(sent: float) -> None:
        reader, writer = await pool.get()
        writer.write(b"GET /status HTTP/1.1\r\n" + head)
        answer = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", answer)
        if not answer.startswith(b"HTTP/1.1 200") or length is None:
            raise SystemExit(f"GET /status answered {answer[:80]!r}")
        await reader.readexactly(int(length[1]))
        latencies.append(time.perf_counter() - sent)
        pool.put_nowait((reader, writer))

    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(one(due)))  # latency counted from when it was due
    await asyncio.gather(*tasks)
    for h in holders:
        h.cancel()
    while not pool.empty():
        pool.get_nowait()[1].close()
    return latencies


def _daemon(info: sbx.SandboxInfo, *argv: str) -> str:
    return subprocess.run(
        info.inside(list(argv)), capture_output=True, text=True, timeout=60, check=True
    ).stdout


def cpu_seconds(info: sbx.SandboxInfo) -> float:
    """The daemon's user + system CPU so far (its /proc stat, in clock ticks)."""
    pid = _daemon(info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").strip()
    fields = _daemon(info, "cat", f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SLOW_RE = re.compile(r"slow event-loop step: ([0-9]+) ms in (.*)")


def slow_callbacks(info: sbx.SandboxInfo, since: float, top: int = 5) -> list[str]:
    """The slowest event-loop steps the daemon logged in its journal since `since` (slow_callback_ms)."""
    text = _daemon(info, "journalctl", "-u", "k25-ctl.service", "-o", "cat", "--since", f"@{since:.0f}")
    seen = sorted(((int(m[1]), m[2]) for m in SLOW_RE.finditer(text)), reverse=True)
    return [f"{ms:4d} ms  {what[:300]}" for ms, what in seen[:top]]


def fill_runs(db: Path, n: int) -> None:
    rng = random.Random(25)  # noqa: S311 - test data, not secrets
    kinds = ("switch", "rollback", "serving", "external", "teardown")
    outcomes = ("active", "failed", "cancelled", "stopped", "crashed", "ok")
    profiles = ("baseline", "vllm-eagle3", "sglang-eagle3")
    with sqlite3.connect(db, timeout=30) as c:
        c.executemany(
            "insert into runs(kind, profile, outcome, phase, started_at, ended_at, load_seconds) "
            "values (?, ?, ?, ?, '2026-11-01 10:00:00.000000', '2026-11-01 10:01:00.000000', 12.5)",
            [(rng.choice(kinds), rng.choice(profiles), o, o) for o in rng.choices(outcomes, k=n)],
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--slow-ms", type=float, default=20.0, help="report event-loop steps longer than this")
    ap.add_argument("--no-debug", action="store_true", help="without the slow-step reports (their own cost)")
    args = ap.parse_args()
    settings = {"max_sse_streams": str(args.streams + 16)}
    if not args.no_debug:
        settings["slow_callback_ms"] = str(args.slow_ms)
    info = sbx.up(load_seconds=0.5, settings=settings)
    try:
        auth = {"Authorization": f"Bearer {info.token}"}
        httpx.post(f"{info.url}/profiles/baseline/activate", params={"wait": True}, headers=auth, timeout=120)
        for n in range(1, args.rounds + 1):
            began, cpu = time.time(), cpu_seconds(info)
            lat = asyncio.run(status_load(info.url, args.rate, args.seconds, args.streams))
            used = (cpu_seconds(info) - cpu) / (time.time() - began)
            print(f"round {n}: GET /status at {args.rate:.0f}/s for {args.seconds:.0f}s with {args.streams} /events "
                  f"streams open: n={len(lat)} p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, "
                  f"max {max(lat) * 1000:.1f} ms (target p99 <= 10 ms); daemon CPU {100 * used:.0f}% of a core")  # fmt: skip
            for line in [] if args.no_debug else slow_callbacks(info, began) or ["none"]:
                print(f"  slowest callbacks over {args.slow_ms:g} ms: {line}")
        fill_runs(Path(info.dir) / "state/k25.db", args.runs)
        # A daemon with that history: it aggregates the runs once at start, then keeps the figures current.
        subprocess.run(info.inside(["systemctl", "restart", "k25-ctl.service"]), check=True, timeout=120)
        with httpx.Client(base_url=info.url, timeout=30) as c:
            c.get("/metrics")
            lat = []
            for _ in range(200):
                t = time.perf_counter()
                c.get("/metrics").raise_for_status()
                lat.append(time.perf_counter() - t)
        print(f"GET /metrics with {args.runs} more runs (daemon restarted over them): p50 {pct(lat, 50):.2f} ms, p99 {pct(lat, 99):.2f} ms, "
              f"mean {statistics.mean(lat) * 1000:.2f} ms (target p99 <= 20 ms)")  # fmt: skip
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
