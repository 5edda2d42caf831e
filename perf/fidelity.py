"""k25-ctl's benchmark against `vllm bench serve` on the same real engine (the realengine tier's CPU vLLM
and tiny model): random prompts of a fixed input length, fixed output length with ignore_eos, temperature
0, the same concurrency; the two tools alternate several times in one run. Prints each tool's output
throughput, mean and median TTFT, TPOT and ITL, and the ratios k25-ctl / vLLM (target: within 3% on
throughput and TPOT). Needs scripts/realengine.sh's cache. `python perf/fidelity.py [--rounds 3]`"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.benchmark.client import Request, new_client, run_level
from daemon.benchmark.metrics import summarize
from daemon.benchmark.prompts import base_prompts
from daemon.benchmark.spec import BenchmarkSpec
from perf.procs import free_port, serving

CACHE = Path(os.environ.get("K25_REALENGINE_DIR", "/var/cache/k25-ctl/realengine"))
KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms",
        "median_itl_ms", "total_input_tokens", "total_output_tokens")  # fmt: skip
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
       "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CACHE_ROOT": str(CACHE / "vllm-cache")}  # fmt: skip


def vllm(*args: str) -> list[str]:
    return [str(CACHE / "venv/bin/python"), str(CACHE / "vllm_launcher.py"), *args]


@contextlib.contextmanager
def server(port: int) -> Iterator[str]:
    """A real vLLM of our own, in its own session: stopped with SIGTERM, then its whole group killed."""
    cmd = vllm("serve", str(CACHE / "model"), "--host", "127.0.0.1", "--port", str(port), "--served-model-name",
               "tiny", "--max-model-len", "1024")  # fmt: skip
    log = Path(tempfile.mkstemp(prefix="fidelity-vllm-", suffix=".log")[1])
    # The engine on core 0, both clients on core 1: on 2 cores a client competing with the engine for CPU
    # would measure its own interference.
    env = os.environ | ENV | {"VLLM_CPU_OMP_THREADS_BIND": "0"}
    with serving(["taskset", "-c", "0", *cmd], port, env=env, within_s=400, log=log) as url:
        yield url


def prompts(url: str, n: int, length: int, seed: int) -> list[str]:
    """Random token ids decoded by the engine itself (as `vllm bench serve`'s random dataset does), so both
    tools send prompts of the same length in tokens."""
    rng = random.Random(seed)  # noqa: S311 - reproducible prompts
    vocab = len(json.loads((CACHE / "model/tokenizer.json").read_text())["model"]["vocab"])
    out = []
    for _ in range(n):
        ids = [rng.randrange(4, vocab) for _ in range(length)]  # 0-3: the special tokens
        text = httpx.post(url + "/detokenize", json={"model": "tiny", "tokens": ids}, timeout=30).json()[
            "prompt"
        ]
        # Decoding then encoding again changes the count: cut to the length and decode once more (as vLLM).
        again = httpx.post(url + "/tokenize", json={"model": "tiny", "prompt": text, "add_special_tokens": False},
                           timeout=30).json()["tokens"][:length]  # fmt: skip
        out.append(
            httpx.post(url + "/detokenize", json={"model": "tiny", "tokens": again}, timeout=30).json()[
                "prompt"
            ]
        )
    return out


def k25(url: str, spec: BenchmarkSpec) -> dict[str, Any]:
    texts = spec.prompts or [p.text for p in base_prompts(spec)]
    bodies = [
        {"model": "tiny", "prompt": t, "max_tokens": spec.max_tokens, "temperature": 0, "ignore_eos": True,
         "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
        for t in texts
    ]  # fmt: skip

    async def go() -> dict[str, Any]:
        client = new_client(300, spec.concurrency[0])
        res = await run_level(client, [Request(url + "/v1/completions", b) for b in bodies],
                              concurrency=spec.concurrency[0], rate=None, timeout_s=300)  # fmt: skip
        await client.aclose()
        summary = summarize(res.records, res.duration)
        chunks = [k for r in res.records for k in (r.chunk_tokens or [])]
        summary["multi_token_chunks_pct"] = 100.0 * sum(1 for k in chunks if k > 1) / max(1, len(chunks))
        return summary

    return asyncio.run(go())


def reference(url: str, spec: BenchmarkSpec, out: Path) -> dict[str, Any]:
    cmd = vllm("bench", "serve", "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
               "--model", "tiny", "--tokenizer", str(CACHE / "model"), "--dataset-name", "random",
               "--random-input-len", str(spec.input_len), "--random-output-len", str(spec.max_tokens),
               "--ignore-eos", "--num-prompts", str(spec.num_prompts), "--max-concurrency",
               str(spec.concurrency[0]), "--temperature", "0", "--num-warmups", "0", "--save-result",
               "--result-dir", str(out.parent), "--result-filename", out.name, "--percentile-metrics",
               "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--seed", str(int(time.time())))  # fmt: skip
    r = subprocess.run(["taskset", "-c", "1", *cmd], env=os.environ | ENV, capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=256)
    args = ap.parse_args()
    spec = BenchmarkSpec.model_validate({"dataset": "random", "input_len": args.input_len,
                                         "max_tokens": args.output_len, "num_prompts": args.prompts,
                                         "concurrency": [args.concurrency]})  # fmt: skip
    rows: dict[str, list[dict[str, Any]]] = {"k25-ctl": [], "vllm bench serve": []}
    with tempfile.TemporaryDirectory() as tmp, server(free_port()) as url:
        os.sched_setaffinity(0, {1})
        k25(url, spec.model_copy(update={"num_prompts": 4}))  # warm the engine once, for both
        for i in range(args.rounds):
            texts = prompts(url, args.prompts, args.input_len, seed=1000 + i)
            rows["k25-ctl"].append(k25(url, spec.model_copy(update={"dataset": "custom", "prompts": texts})))
            rows["vllm bench serve"].append(reference(url, spec, Path(tmp) / f"ref-{i}.json"))
    print(
        f"real vLLM (CPU, tiny model): {args.rounds} rounds alternating, {args.prompts} prompts, "
        f"input ~{args.input_len}, output {args.output_len} (ignore_eos), concurrency {args.concurrency}"
    )
    print(f"{'metric':22} {'k25-ctl':>12} {'vllm bench':>12} {'ratio':>8}   per round (k25 / vllm)")
    for key in KEYS:
        a = [float(r[key]) for r in rows["k25-ctl"]]
        b = [float(r[key]) for r in rows["vllm bench serve"]]
        ma, mb = statistics.mean(a), statistics.mean(b)
        rounds = ", ".join(f"{x:.2f}/{y:.2f}" for x, y in zip(a, b, strict=True))
        print(f"{key:22} {ma:12.2f} {mb:12.2f} {ma / mb if mb else float('nan'):8.3f}   {rounds}")
    extra = ("mean_itl_per_token_ms", "multi_token_chunks_pct")
    for key in extra:
        values = [float(r[key]) for r in rows["k25-ctl"]]
        print(
            f"k25-ctl {key}: {statistics.mean(values):.2f} (per round {', '.join(f'{v:.2f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
