"""k25-ctl's benchmark against `vllm bench serve` on the same real engine (the realengine tier's CPU vLLM
and tiny model): random prompts of a fixed input length, fixed output length with ignore_eos, temperature
0; the two tools alternate, round after round, in three modes: a fixed concurrency (4), a single stream
(concurrency 1: the operators' figure) and Poisson arrivals at a fixed request rate. For each metric it
prints both tools' means, the ratio k25-ctl / vLLM with its 95% interval over the rounds (Student's t on
the per-round ratios), and a verdict: `ok` (the interval lies within 1 +- 3%), `FLAG` (it lies outside),
`wide` (more rounds needed). Each mode starts with an unmeasured run at its full size, and the
order of the tools alternates round by round (ABBA: a drift weighs on both alike). The engine runs on core 0 and each client on core 1 (taskset) where the
machine has two cores or more. `--evidence` prints round 1's per-request TTFTs of both tools, sorted, and
which of k25-ctl's requests began with a token that had no text. Needs scripts/realengine.sh's cache.
`python perf/fidelity.py [--rounds 6] [--modes c4,c1,rate] [--evidence]`"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import daemon.benchmark.client as client_mod
from daemon.benchmark.client import Request, new_client, run_level
from daemon.benchmark.metrics import StreamReader, summarize
from daemon.benchmark.prompts import base_prompts
from daemon.benchmark.spec import BenchmarkSpec
from perf.procs import free_port, serving

CACHE = Path(os.environ.get("K25_REALENGINE_DIR", "/var/cache/k25-ctl/realengine"))
KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms",
        "median_itl_ms")  # fmt: skip
# Each client on core 1, the engine on core 0, where there are two cores: a client competing with the engine
# for a core would measure its own interference.
CONTINUOUS = [True]  # usage on every chunk, as the daemon's benchmarks ask (--no-continuous-usage: off)
CLIENT_CORE = ["taskset", "-c", "1"] if (os.cpu_count() or 1) >= 2 else []
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
    with serving(
        [*(["taskset", "-c", "0"] if CLIENT_CORE else []), *cmd], port, env=env, within_s=400, log=log
    ) as url:
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


@dataclass(frozen=True)
class Mode:
    name: str
    concurrency: int
    rate: float | None  # Poisson arrivals (req/s), or None: a closed loop at `concurrency`
    prompts: int


MODES = {
    "c4": Mode("concurrency 4", 4, None, 32),
    "c1": Mode("concurrency 1", 1, None, 8),
    "rate": Mode("rate 2 req/s", 32, 2.0, 32),
}
# Student's t, two-sided 95%, by degrees of freedom (rounds - 1).
T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 19: 2.093, 24: 2.064, 29: 2.045}  # fmt: skip


class _Evidence(StreamReader):
    """The client's own reader, noting when each request's first chunk with choices came, whether it had
    text, and when the first text came (what k25-ctl took as TTFT before #26)."""

    seen: ClassVar[dict[int, tuple[float, bool]]] = {}
    first_text: ClassVar[dict[int, float]] = {}

    def feed(self, data: str, at: float) -> None:
        if '"choices":[{' in data.replace(" ", ""):
            text = bool(json.loads(data)["choices"][0].get("text"))
            _Evidence.seen.setdefault(self.r.index, (at - self.r.sent, text))
            if text:
                _Evidence.first_text.setdefault(self.r.index, at - self.r.sent)
        super().feed(data, at)


def k25(url: str, spec: BenchmarkSpec, mode: Mode) -> dict[str, Any]:
    texts = spec.prompts or [p.text for p in base_prompts(spec)]
    bodies = [
        {"model": "tiny", "prompt": t, "max_tokens": spec.max_tokens, "temperature": 0, "ignore_eos": True,
         "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": CONTINUOUS[0]}}
        for t in texts
    ]  # fmt: skip

    async def go() -> dict[str, Any]:
        client = new_client(300, mode.concurrency)
        res = await run_level(client, [Request(url + "/v1/completions", b) for b in bodies],
                              concurrency=mode.concurrency, rate=mode.rate, timeout_s=300,
                              seed=int(time.time()))  # fmt: skip
        await client.aclose()
        summary = summarize(res.records, res.duration)
        summary["ttfts"] = [r.ttft for r in res.records]
        return summary

    return asyncio.run(go())


def reference(url: str, spec: BenchmarkSpec, mode: Mode, out: Path) -> dict[str, Any]:
    cmd = vllm("bench", "serve", "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
               "--model", "tiny", "--tokenizer", str(CACHE / "model"), "--dataset-name", "random",
               "--random-input-len", str(spec.input_len), "--random-output-len", str(spec.max_tokens),
               "--ignore-eos", "--num-prompts", str(spec.num_prompts), "--max-concurrency",
               str(mode.concurrency), "--temperature", "0", "--num-warmups", "0", "--save-result",
               "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
               "--seed", str(int(time.time())))  # fmt: skip
    if mode.rate is not None:
        cmd += ["--request-rate", str(mode.rate)]
    r = subprocess.run([*CLIENT_CORE, *cmd], env=os.environ | ENV, capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """The mean per-round ratio and its 95% interval (Student's t over the rounds)."""
    mean = statistics.mean(ratios)
    if len(ratios) < 2:
        return mean, float("nan"), float("nan")
    t = T95.get(len(ratios) - 1) or T95[max(k for k in T95 if k <= len(ratios) - 1)]
    half = t * statistics.stdev(ratios) / math.sqrt(len(ratios))
    return mean, mean - half, mean + half


def verdict(lo: float, hi: float, band: float = 0.03) -> str:
    if math.isnan(lo):
        return "wide"
    if 1 - band <= lo and hi <= 1 + band:
        return "ok"
    return "FLAG" if hi < 1 - band or lo > 1 + band else "wide"


def evidence(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    a = sorted(x * 1000 for x in ours["ttfts"] if x is not None)
    b = sorted(x * 1000 for x in theirs["ttfts"])
    print("per-request TTFT (ms), sorted: k25-ctl | vllm bench serve")
    for i in range(max(len(a), len(b))):
        left = f"{a[i]:8.1f}" if i < len(a) else " " * 8
        right = f"{b[i]:8.1f}" if i < len(b) else ""
        print(f"  {i:3d} {left} | {right}")
    textless = sorted(i for i, (_, text) in _Evidence.seen.items() if not text)
    print(f"k25-ctl requests whose first token came without text: {textless or 'none'}")
    for i in textless:
        print(
            f"  request {i}: first token {1000 * _Evidence.seen[i][0]:.1f} ms (TTFT now), first text "
            f"{1000 * _Evidence.first_text.get(i, float('nan')):.1f} ms (TTFT before #26)"
        )
    before = [_Evidence.first_text.get(i, t) for i, (t, _) in sorted(_Evidence.seen.items())]
    print(
        f"mean TTFT: k25-ctl {1000 * statistics.mean(x for x in ours['ttfts'] if x is not None):.2f} ms "
        f"(with the old rule {1000 * statistics.mean(before):.2f}), vllm {statistics.mean(b):.2f} ms"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--modes", default="c4,c1,rate", help="of: " + ", ".join(MODES))
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--evidence", action="store_true", help="round 1's per-request TTFTs, sorted")
    ap.add_argument("--no-continuous-usage", action="store_true",
                    help="k25-ctl's requests without continuous_usage_stats (what it costs the engine)")  # fmt: skip
    args = ap.parse_args()
    CONTINUOUS[0] = not args.no_continuous_usage
    modes = [MODES[m] for m in args.modes.split(",")]
    if args.evidence:
        client_mod.StreamReader = _Evidence  # type: ignore[attr-defined]  # the client reads through it
    pinned = "engine on core 0, clients on core 1" if CLIENT_CORE else "not pinned (one core)"
    print(f"real vLLM (CPU, tiny model); input ~{args.input_len}, output {args.output_len} (ignore_eos); "
          f"{args.rounds} rounds per mode, the tools alternating; {pinned}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, server(free_port()) as url:
        if CLIENT_CORE:
            os.sched_setaffinity(0, {1})
        warm = BenchmarkSpec.model_validate({"dataset": "random", "input_len": args.input_len, "max_tokens": 16,
                                             "num_prompts": 4, "concurrency": [4]})  # fmt: skip
        k25(url, warm, MODES["c4"])  # the engine's first requests are slower, for both: not measured
        for mode in modes:
            spec = BenchmarkSpec.model_validate({"dataset": "random", "input_len": args.input_len,
                                                 "max_tokens": args.output_len, "num_prompts": mode.prompts,
                                                 "concurrency": [mode.concurrency]})  # fmt: skip
            rows: dict[str, list[dict[str, Any]]] = {"k25": [], "vllm": []}
            # The engine still speeds up over its first full-size batches (new shapes): one such run first,
            # not measured; then the order alternates (ABBA), so a drift weighs on both tools alike.
            k25(url, spec, mode)
            for i in range(args.rounds):
                texts = prompts(url, mode.prompts, args.input_len, seed=1000 + i)
                _Evidence.seen.clear()
                _Evidence.first_text.clear()
                ours = spec.model_copy(update={"dataset": "custom", "prompts": texts})
                for tool in ("k25", "vllm") if i % 2 == 0 else ("vllm", "k25"):
                    if tool == "k25":
                        rows["k25"].append(k25(url, ours, mode))
                    else:
                        rows["vllm"].append(reference(url, spec, mode, Path(tmp) / f"ref-{i}.json"))
                if args.evidence and i == 0:
                    evidence(rows["k25"][0], rows["vllm"][0])
            report(mode, rows)


def report(mode: Mode, rows: dict[str, list[dict[str, Any]]]) -> None:
    print(f"\n{mode.name}: {len(rows['k25'])} rounds of {mode.prompts} requests per tool")
    print(
        f"{'metric':20} {'k25-ctl':>9} {'vllm':>9} {'ratio':>7} {'95% interval':>17}  verdict   per round (k25 / vllm)"
    )
    for key in KEYS:
        a = [float(r[key]) for r in rows["k25"]]
        b = [float(r[key]) for r in rows["vllm"]]
        mean, lo, hi = interval([x / y for x, y in zip(a, b, strict=True) if y])
        rounds = ", ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(a, b, strict=True))
        print(f"{key:20} {statistics.mean(a):9.2f} {statistics.mean(b):9.2f} {mean:7.3f} "
              f"[{lo:6.3f}, {hi:6.3f}]  {verdict(lo, hi):8}  {rounds}")  # fmt: skip


if __name__ == "__main__":
    main()
