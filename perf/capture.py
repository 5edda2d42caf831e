"""The capture sink under load, against the daemon in a sandbox with the baseline active: GET /status at
50 requests/s alone, then again while mirrored requests (1 KB prompts) arrive at 500/s (open loop, raw
HTTP/1.1 keep-alive connections as a balancer's mirror keeps them): the sink's p50/p99, /status p50/p99
in the same run, the daemon's CPU over each phase; then a flood past the caps (as fast as the daemon takes
them): the rows and the database's size on disk stay bounded. Targets: sink p99 <= 5 ms, /status p99
unchanged within noise. Needs root. `python perf/capture.py [--seconds 20] [--flood 30000]`"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from perf.api_load import cpu_seconds, pct

MAX_ROWS, MAX_BYTES = 20_000, 8 * 1024**2


class Conn:
    """Keep-alive HTTP/1.1 connections to the daemon, each used by one request at a time."""

    def __init__(self, url: str) -> None:
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def open(self, n: int) -> None:
        for _ in range(n):
            self.pool.put_nowait(await asyncio.open_connection(self.host, self.port))

    async def request(self, head: bytes, body: bytes = b"") -> int:
        reader, writer = await self.pool.get()
        writer.write(head + body)
        answer = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length: *(\d+)", answer)
        await reader.readexactly(int(length[1]) if length else 0)
        self.pool.put_nowait((reader, writer))
        return int(answer[9:12])

    def close(self) -> None:
        while not self.pool.empty():
            self.pool.get_nowait()[1].close()


async def open_loop(rate: float, seconds: float, one: Callable[[], Awaitable[int]]) -> list[float]:
    """Requests leave on schedule whatever the answers do; latency counted from when each was due."""
    latencies: list[float] = []

    async def timed(due: float) -> None:
        status = await one()
        if status >= 300:
            raise SystemExit(f"answered {status}")
        latencies.append(time.perf_counter() - due)

    tasks = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        tasks.append(asyncio.create_task(timed(due)))
    await asyncio.gather(*tasks)
    return latencies


def sink_request(host: str, token: str, i: int) -> tuple[bytes, bytes]:
    body = json.dumps({"model": "kimi-k2.5", "prompt": f"request {i}: " + "lorem ipsum " * 80,
                       "max_tokens": 256, "temperature": 0.7}).encode()  # fmt: skip
    head = (
        f"POST /capture/v1/completions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nX-K25-Category: code\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head, body


def disk(info: sbx.SandboxInfo) -> int:
    state = Path(info.config).parent.parent / "state"
    return sum(p.stat().st_size for p in state.glob("k25.db*") if p.is_file())


async def phases(info: sbx.SandboxInfo, token: str, seconds: float, flood: int) -> None:
    host = info.url.removeprefix("http://")
    status_head = f"GET /status HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    status, sink = Conn(info.url), Conn(info.url)
    await status.open(8)
    await sink.open(64)
    counter = iter(range(10**9))

    async def one_status() -> int:
        return await status.request(status_head)

    async def one_sink() -> int:
        return await sink.request(*sink_request(host, token, next(counter)))

    cpu0, t0 = cpu_seconds(info), time.monotonic()
    alone = await open_loop(50, seconds, one_status)
    cpu_alone = 100 * (cpu_seconds(info) - cpu0) / (time.monotonic() - t0)
    cpu0, t0 = cpu_seconds(info), time.monotonic()
    both_status, sunk = await asyncio.gather(
        open_loop(50, seconds, one_status), open_loop(500, seconds, one_sink)
    )
    cpu_both = 100 * (cpu_seconds(info) - cpu0) / (time.monotonic() - t0)
    print(f"/status alone:           p50 {pct(alone, 50):6.2f} ms  p99 {pct(alone, 99):6.2f} ms  "
          f"daemon CPU {cpu_alone:5.1f}% of a core")  # fmt: skip
    print(f"/status, sink at 500/s:  p50 {pct(both_status, 50):6.2f} ms  p99 {pct(both_status, 99):6.2f} ms  "
          f"daemon CPU {cpu_both:5.1f}% of a core")  # fmt: skip
    print(f"sink at 500/s:           p50 {pct(sunk, 50):6.2f} ms  p99 {pct(sunk, 99):6.2f} ms  "
          f"({len(sunk)} requests; target p99 <= 5 ms)")  # fmt: skip
    before = disk(info)
    t0 = time.monotonic()
    await asyncio.gather(*(one_sink() for _ in range(flood)))
    took = time.monotonic() - t0
    print(f"flood: {flood} requests in {took:.1f} s ({flood / took:.0f}/s)")
    sink.close()
    status.close()
    print(f"database on disk: {before / 2**20:.1f} MiB before the flood")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--flood", type=int, default=30_000)
    args = ap.parse_args()
    capture = f"{{enabled = true, sample_rate = 1.0, max_rows = {MAX_ROWS}, max_bytes = {MAX_BYTES}}}"
    info = sbx.up(load_seconds=0.5, settings={"capture": capture})
    try:
        token = (Path(info.config).parent / "capture-token").read_text().strip()
        with httpx.Client(
            base_url=info.url, timeout=120, headers={"Authorization": f"Bearer {info.token}"}
        ) as c:
            assert c.post("/profiles/baseline/activate", params={"wait": True}).json()["outcome"] == "active"
            asyncio.run(phases(info, token, args.seconds, args.flood))
            deadline = time.monotonic() + 60
            while (st := c.get("/capture").json())["pending"] and time.monotonic() < deadline:
                time.sleep(0.2)  # the writer catching up: a perf program's wait, not a test's
            counts = st["since_start"]
            print(f"kept {st['rows']} rows, {st['bytes'] / 2**20:.1f} MiB of bodies (caps {MAX_ROWS} rows, "
                  f"{MAX_BYTES / 2**20:.0f} MiB); {counts['kept']} taken, {counts['dropped_caps']} dropped by the "
                  f"caps, {counts['dropped_pending']} by the writer's backlog")  # fmt: skip
            print(f"database on disk after the flood: {disk(info) / 2**20:.1f} MiB (k25.db and its WAL; bodies "
                  f"capped at {MAX_BYTES / 2**20:.0f} MiB, the WAL cut back to 16 MiB at checkpoints)")  # fmt: skip
            if st["pending"]:
                print(f"NOT SETTLED: {st['pending']} still pending after 60 s")
                print(subprocess.run(info.inside(["journalctl", "-u", "k25-ctl", "-o", "cat", "-n", "30"]),
                                     capture_output=True, text=True).stdout)  # fmt: skip
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
