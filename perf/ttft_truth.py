"""Whose TTFT is right: k25-ctl's client and `vllm bench serve` side by side (as perf/fidelity.py runs them)
against perf/stepped_streamer.py, a server that steps like a batched engine and knows each request's
true TTFT (last byte of the request read -> first token written). Printed per tool: the mean and the
deciles of (measured TTFT - true TTFT) over the same requests, and the mean TTFT itself. What a client
adds on top of the truth is its own time: building and sending the request, and waking for the first
chunk while the other streams' chunks of the same step are read. `--alone`: one tool after the other (the
server's steps do not drift as a real engine's do, so the two see the same server): what each client adds
without the other on its core. Needs scripts/realengine.sh's cache (vLLM's client and the tiny model's
tokenizer). `python perf/ttft_truth.py [--rounds 6] [--concurrency 4] [--alone]`"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.measure.spec import BenchmarkSpec
from perf.fidelity import CLIENT_CORE, ENV, Mode, bench_serve, datasets, k25, paired
from perf.procs import free_port, serving


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--step-ms", type=float, default=3.0)
    ap.add_argument("--prefill-ms", type=float, default=5.0)
    ap.add_argument("--alone", action="store_true", help="one tool after the other, not side by side")
    args = ap.parse_args()
    mode = Mode(f"concurrency {args.concurrency}", args.concurrency, None, args.requests)
    port = free_port()
    server = [*(["taskset", "-c", "0"] if CLIENT_CORE else []), sys.executable,
              str(Path(__file__).with_name("stepped_streamer.py")), str(port), str(args.step_ms / 1000),
              str(args.prefill_ms / 1000)]  # fmt: skip
    spec = BenchmarkSpec.model_validate({"dataset": "random", "input_len": 64, "max_tokens": 32,
                                         "num_prompts": args.requests, "concurrency": [args.concurrency]})  # fmt: skip
    seeds = [2000 + i for i in range(args.rounds)]
    works = datasets(seeds, args.requests, 64, 32, 0.5)
    errors: dict[str, list[float]] = {"k25": [], "vllm": []}
    ttfts: dict[str, list[float]] = {"k25": [], "vllm": []}
    with tempfile.TemporaryDirectory() as tmp, serving(server, port) as url:
        if CLIENT_CORE:
            os.sched_setaffinity(0, {1})
        for seed in seeds:
            work = works[seed]
            out = Path(tmp) / f"ref-{seed}.json"
            if args.alone:
                subprocess.run(bench_serve(url, spec, seed, mode, out), env=os.environ | ENV, check=True,
                               capture_output=True, timeout=900)  # fmt: skip
                theirs, mine = json.loads(out.read_text()), k25(url, mode, work)
            else:
                mine, theirs = paired(url, spec, work, seed, mode, out)
            truth = httpx.get(url + "/truth", timeout=10).json()
            for tool, key, measured in (("k25", "1", mine["ttfts"]), ("vllm", "0", theirs["ttfts"])):
                for (prompt, _), t in zip(work, measured, strict=True):
                    if t is not None and f"{key}:{prompt}" in truth:
                        errors[tool].append(1000 * (t - truth[f"{key}:{prompt}"]))
                        ttfts[tool].append(1000 * t)
    print(f"stepped server: a step every {args.step_ms} ms, prefill {args.prefill_ms} ms; {args.rounds} rounds of "
          f"{args.requests} requests per tool at concurrency {args.concurrency}, "
          f"{'one after the other' if args.alone else 'side by side'}; engine-like "
          f"server on core 0, both clients on core 1" if CLIENT_CORE else "")  # fmt: skip
    for tool, name in (("k25", "k25-ctl"), ("vllm", "vllm bench serve")):
        e = errors[tool]
        q = statistics.quantiles(e, n=10)
        print(f"{name:17} mean TTFT {statistics.mean(ttfts[tool]):6.2f} ms; measured - true: mean {statistics.mean(e):+.3f} "
              f"ms, median {statistics.median(e):+.3f}, deciles 1/9 {q[0]:+.3f}/{q[-1]:+.3f} ms ({len(e)} requests)")  # fmt: skip


if __name__ == "__main__":
    main()
