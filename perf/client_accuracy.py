"""How accurate the benchmark client is, and how many streamed tokens/s it sustains on this machine.

1. Accuracy: the fake engine streams at a known rate (per stream); k25-ctl's client measures it at a few
   concurrency levels. Printed: the measured output throughput against rate x concurrency, and TPOT
   against 1/rate, with their errors (target: throughput error < 2%).
2. Capacity: the per-stream rate stays fixed and concurrency grows until the measured throughput falls more
   than 5% below what the engine streams (the client, or the fake engine beside it on the same 2 cores,
   can no longer keep up). Printed: the largest undistorted aggregate and the client's own CPU per token,
   for one token per chunk and for 4-token chunks (speculative decoding's shape). Target: >= 20,000
   streamed tokens/s. `python perf/client_accuracy.py`"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.measure.client import Request, new_client, run_level
from daemon.measure.metrics import summarize
from perf.procs import free_port, serving


@contextlib.contextmanager
def fake_engine(rate: float, spec_tokens: int = 0) -> Iterator[str]:
    """A fake vLLM at `rate` tokens/s per stream, in its own process (ours to stop)."""
    with tempfile.TemporaryDirectory() as tmp:
        dev, shm = Path(tmp, "dev"), Path(tmp, "shm")
        dev.mkdir()
        shm.mkdir()
        (dev / "nvidia0").write_bytes(b"\0" * 4096)
        port = free_port()
        cmd = [sys.executable, "-m", "k25_sandbox.fake_engine", "--flavor", "vllm", "--port", str(port),
               "--rate", str(rate), "--load-seconds", "0", "--shards", "1", "--device-dir", str(dev),
               "--shm-dir", str(shm), "--workers", "1"]  # fmt: skip
        if spec_tokens:
            cmd += ["--spec-tokens", str(spec_tokens), "--acceptance", "1.0"]
        with serving(cmd, port, env=os.environ | {"CUDA_VISIBLE_DEVICES": "0"}) as url:
            yield url


@contextlib.contextmanager
def lean_streamer(rate: float, per_chunk: int) -> Iterator[str]:
    """perf/lean_streamer.py in its own process: nearly free per token, so the client is what is measured."""
    port = free_port()
    cmd = [
        sys.executable,
        str(Path(__file__).with_name("lean_streamer.py")),
        str(port),
        str(rate),
        str(per_chunk),
    ]
    with serving(cmd, port) as url:
        yield url


def requests(url: str, n: int, max_tokens: int) -> list[Request]:
    body = {"model": "kimi-k2.5", "prompt": "hello", "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    return [Request(url + "/v1/completions", body) for _ in range(n)]


async def level(url: str, concurrency: int, n: int, max_tokens: int) -> tuple[dict[str, float], float]:
    client = new_client(120, concurrency)
    cpu0 = time.process_time()
    res = await run_level(
        client, requests(url, n, max_tokens), concurrency=concurrency, rate=None, timeout_s=120
    )
    cpu = time.process_time() - cpu0
    await client.aclose()
    s = summarize(res.records, res.duration)
    assert s["failed"] == 0, s["errors"]
    return s, cpu


def accuracy(rate: float) -> None:
    print(f"1. accuracy: fake engine at {rate:g} tok/s per stream, 400 tokens per request")
    with fake_engine(rate) as url:
        for conc in (1, 4, 16):
            s, _ = asyncio.run(level(url, conc, conc * 2, 400))
            want_thr, want_tpot = rate * conc, 1000.0 / rate
            print(f"   concurrency {conc:3d}: output {s['output_throughput']:9.1f} tok/s vs {want_thr:8.1f} "
                  f"({100 * (s['output_throughput'] / want_thr - 1):+.2f}%), TPOT {s['mean_tpot_ms']:.3f} ms vs "
                  f"{want_tpot:.3f} ({100 * (s['mean_tpot_ms'] / want_tpot - 1):+.2f}%), "
                  f"decode {s['mean_decode_tok_s']:.1f} tok/s per stream")  # fmt: skip


def capacity(rate: float, per_chunk: int) -> None:
    print(f"2. capacity: lean streamer at {rate:g} tok/s per stream, {per_chunk} token(s) per chunk")
    best = 0.0
    with lean_streamer(rate, per_chunk) as url:
        for conc in (8, 16, 24, 32, 48, 64, 96, 128):
            s, cpu = asyncio.run(level(url, conc, conc * 2, int(rate * 1.5)))
            want = rate * conc
            ratio = s["output_throughput"] / want
            print(f"   concurrency {conc:3d}: {s['output_throughput']:9.0f} tok/s of {want:9.0f} streamed "
                  f"({100 * ratio:5.1f}%), client CPU {1e6 * cpu / s['total_output_tokens']:.1f} us/token "
                  f"({s['total_output_tokens'] / cpu:,.0f} tokens per CPU second)")  # fmt: skip
            if ratio < 0.95:
                break
            best = max(best, s["output_throughput"])
    print(f"   sustained without distortion (>= 95% of what was streamed): {best:,.0f} tok/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rate", type=float, default=82.5, help="accuracy: tokens/s per stream")
    ap.add_argument("--fast-rate", type=float, default=1000.0, help="capacity: tokens/s per stream")
    args = ap.parse_args()
    print(f"cpus: {os.cpu_count()}")
    accuracy(args.rate)
    capacity(args.fast_rate, 1)
    capacity(args.fast_rate, 4)


if __name__ == "__main__":
    main()
