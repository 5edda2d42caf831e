"""k25-ctl's benchmark against `vllm bench serve` on the same real engine (the realengine tier's CPU vLLM
and tiny model), in three modes: a fixed concurrency (4), a single stream (concurrency 1: the operators'
figure) and Poisson arrivals at a fixed request rate. Both tools send the same requests: vLLM's own random
dataset, sampled in its venv with the seed `vllm bench serve` is given (input and output lengths uniform
in mean * (1 +- r), ignore_eos, temperature 0), k25-ctl in a shuffled order (in one order the two loops
run in step and the tool that leads gets each prefill first); TTFTs are paired request by request.

The two tools run at the same time, each with the mode's settings (the engine batches both): this
machine's engine changes speed by up to 3x from one ten-second stretch to the next, so two tools measured
one after the other compare two engines (a sequential ABBA design gave per-round ratios of 0.77-1.28).
Measured side by side, every batch, every stall, holds requests of both; k25-ctl starts when `vllm bench
serve` says its main run begins, and the gap between the two first sends is printed (both use the
machine's monotonic clock). Many short requests per round, of spread lengths: a request's TTFT depends on
where in the engine's step it lands, and two closed loops of equal requests lock into a phase for a whole
round (fixed lengths gave per-round TTFT ratios of 0.79-1.16 at concurrency 4).

For each metric it prints both tools' means, the ratio k25-ctl / vLLM with its 95% interval over the rounds
(Student's t on the per-round ratios), and a verdict: `ok` (the interval lies within 1 +- 3%), `FLAG` (it
lies outside), `wide` (more rounds needed). Each mode starts with a round that is not measured. The engine
runs on core 0 and both clients on core 1 (taskset) where the machine has two cores or more (a third core
would give each client its own). `--evidence` prints round 1's per-request TTFTs of both tools, sorted,
and which of k25-ctl's requests began with a token that had no text. Needs scripts/realengine.sh's cache.
`python perf/fidelity.py [--rounds 16] [--modes c4,c1,rate] [--output-len 32] [--range-ratio 0.5]
[--scale 1] [--evidence]`"""

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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import daemon.measure.client as client_mod
from daemon.measure.client import Request, new_client, run_level
from daemon.measure.metrics import StreamReader, summarize
from daemon.measure.prompts import base_prompts
from daemon.measure.spec import BenchmarkSpec
from perf.procs import free_port, serving

CACHE = Path(os.environ.get("K25_REALENGINE_DIR", "/var/cache/k25-ctl/realengine"))
KEYS = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "mean_itl_ms",
        "median_itl_ms")  # fmt: skip
# Each client on core 1, the engine on core 0, where there are two cores: a client competing with the engine
# for a core would measure its own interference.
RANGE = [0.5]  # --range-ratio, for vllm bench serve's command line
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


# vLLM's own random dataset, sampled in its venv with the seed `vllm bench serve` is given: both tools send
# the same prompts with the same output lengths (token ids in a row from a random offset, decoded and
# re-encoded to the target length; lengths uniform in mean * (1 +- r)).
SAMPLE = """
import json, sys
from vllm.benchmarks.datasets.datasets import RandomDataset
from vllm.tokenizers import get_tokenizer
a = json.loads(sys.argv[1])
tok = get_tokenizer(a["tokenizer"], tokenizer_mode="auto", trust_remote_code=False)
out = {}
for seed in a["seeds"]:
    rs = RandomDataset(random_seed=seed, dataset_path=None, disable_shuffle=False).sample(
        tokenizer=tok, num_requests=a["n"], prefix_len=0, input_len=a["input_len"],
        output_len=a["output_len"], range_ratio=a["ratio"], request_id_prefix="", batchsize=1,
        no_oversample=False)
    out[seed] = [[r.prompt, r.expected_output_len] for r in rs]
print(json.dumps(out))
"""


def datasets(
    seeds: list[int], n: int, input_len: int, output_len: int, ratio: float
) -> dict[int, list[tuple[str, int]]]:
    """Each seed's requests, as `vllm bench serve --seed SEED` samples them (one process: vLLM's import
    takes 20 s)."""
    args = {"tokenizer": str(CACHE / "model"), "seeds": seeds, "n": n, "input_len": input_len,
            "output_len": output_len, "ratio": ratio}  # fmt: skip
    r = subprocess.run([str(CACHE / "venv/bin/python"), "-c", SAMPLE, json.dumps(args)], env=os.environ | ENV,
                       capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    found = json.loads(r.stdout.strip().splitlines()[-1])
    return {int(k): [(str(p), int(m)) for p, m in v] for k, v in found.items()}


@dataclass(frozen=True)
class Mode:
    name: str
    concurrency: int
    rate: float | None  # Poisson arrivals (req/s), or None: a closed loop at `concurrency`
    prompts: int


# Many short requests per round: a request's TTFT varies by +-35% with where in the engine's step it lands,
# so TTFT within 3% takes thousands of requests per tool (32 requests of 256 tokens per round measured
# throughput, TPOT and ITL within 0.5%, TTFT only within 10%). At a rate each tool's own arrivals bunch at
# other moments than the other's, and its requests meet other batch sizes: per-round ITL ratios of
# 0.95-1.15 with 128 requests (following vLLM's own arrival times instead paired each request with one of
# vLLM's arriving in the same step: ITL within +-1.3%, TTFT +-3% as the two competed for the prefill).
MODES = {
    "c4": Mode("concurrency 4", 4, None, 384),
    "c1": Mode("concurrency 1", 1, None, 288),
    "rate": Mode("rate 8 req/s", 128, 8.0, 512),
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


def k25(url: str, mode: Mode, work: list[tuple[str, int]]) -> dict[str, Any]:
    """k25-ctl's client over `work` (prompt, output tokens), with the mode's settings."""
    bodies = [
        {"model": "tiny", "prompt": t, "max_tokens": m, "temperature": 0, "ignore_eos": True,
         "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": CONTINUOUS[0]}}
        for t, m in work
    ]  # fmt: skip

    async def go() -> dict[str, Any]:
        client = new_client(300, mode.concurrency)
        start = time.perf_counter()
        res = await run_level(client, [Request(url + "/v1/completions", b) for b in bodies],
                              concurrency=mode.concurrency, rate=mode.rate, timeout_s=300,
                              seed=int(time.time()))  # fmt: skip
        await client.aclose()
        summary = summarize(res.records, res.duration)
        summary["ttfts"] = [r.ttft for r in res.records]
        summary["first_send"] = start + min(r.sent for r in res.records)
        return summary

    return asyncio.run(go())


def bench_serve(url: str, spec: BenchmarkSpec, seed: int, mode: Mode, out: Path) -> list[str]:
    """`vllm bench serve`'s command line for the mode, on its own core, saving every request to `out`."""
    cmd = vllm("bench", "serve", "--backend", "vllm", "--base-url", url, "--endpoint", "/v1/completions",
               "--model", "tiny", "--tokenizer", str(CACHE / "model"), "--dataset-name", "random",
               "--random-input-len", str(spec.input_len), "--random-output-len", str(spec.max_tokens),
               "--ignore-eos", "--num-prompts", str(spec.num_prompts), "--max-concurrency",
               str(mode.concurrency), "--temperature", "0", "--num-warmups", "0", "--save-result",
               "--save-detailed", "--result-dir", str(out.parent), "--result-filename", out.name,
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
               "--disable-tqdm", "--seed", str(seed), "--random-range-ratio", str(RANGE[0]))  # fmt: skip
    if mode.rate is not None:
        cmd += ["--request-rate", str(mode.rate)]
    return [*CLIENT_CORE, *cmd]


def paired(
    url: str, spec: BenchmarkSpec, work: list[tuple[str, int]], seed: int, mode: Mode, out: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`vllm bench serve` and k25-ctl at the same time, each with the mode's settings: k25-ctl starts when
    vLLM prints its main run's settings (its last line before the first request)."""
    env = os.environ | ENV | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(bench_serve(url, spec, seed, mode, out), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    assert proc.stdout is not None
    said = []
    try:
        for line in proc.stdout:
            said.append(line)
            if line.startswith("Maximum request concurrency"):
                break
        else:
            raise SystemExit("vllm bench serve ended before its main run:\n" + "".join(said[-40:]))
        # The same requests in another order: in the same order the two loops run in step, and the tool
        # that started first has each request's prefill scheduled first (vLLM's TTFT was 0.3 ms longer).
        order = list(range(len(work)))
        random.Random(seed).shuffle(order)  # noqa: S311 - a reproducible order
        mine = k25(url, mode, [work[j] for j in order])
        unshuffled: list[float | None] = [None] * len(work)
        for k, j in enumerate(order):
            unshuffled[j] = mine["ttfts"][k]
        mine["ttfts"] = unshuffled  # request i is vLLM's request i
        said.append(proc.stdout.read())
        if proc.wait(timeout=900) != 0:
            raise SystemExit("vllm bench serve failed:\n" + "".join(said)[-4000:])
    finally:
        if proc.poll() is None:
            proc.kill()  # our own child, by its PID
            proc.wait()
    theirs: dict[str, Any] = json.loads(out.read_text())
    mine["start_gap_ms"] = 1000 * (mine["first_send"] - min(theirs["start_times"]))
    return mine, theirs


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
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--modes", default="c4,c1,rate", help="of: " + ", ".join(MODES))
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--scale", type=float, default=1.0, help="requests per round, times this")
    ap.add_argument("--range-ratio", type=float, default=0.5,
                    help="input and output lengths uniform in mean*(1 +- r), as vllm's --random-range-ratio")  # fmt: skip
    ap.add_argument("--evidence", action="store_true", help="round 1's per-request TTFTs, sorted")
    ap.add_argument("--no-continuous-usage", action="store_true",
                    help="k25-ctl's requests without continuous_usage_stats (what it costs the engine)")  # fmt: skip
    args = ap.parse_args()
    CONTINUOUS[0] = not args.no_continuous_usage
    RANGE[0] = args.range_ratio
    modes = [
        replace(MODES[m], prompts=max(2, round(MODES[m].prompts * args.scale))) for m in args.modes.split(",")
    ]
    if args.evidence:
        client_mod.StreamReader = _Evidence  # type: ignore[attr-defined]  # the client reads through it
    pinned = "engine on core 0, both clients on core 1" if CLIENT_CORE else "not pinned (one core)"
    print(f"real vLLM (CPU, tiny model); input ~{args.input_len}, output {args.output_len} (ignore_eos); "
          f"{args.rounds} rounds per mode, the tools side by side; {pinned}")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp, server(free_port()) as url:
        if CLIENT_CORE:
            os.sched_setaffinity(0, {1})
        warm = BenchmarkSpec.model_validate({"dataset": "random", "input_len": args.input_len, "max_tokens": 16,
                                             "num_prompts": 8, "concurrency": [4]})  # fmt: skip
        # The engine's first requests are slower, for both: not measured.
        k25(url, MODES["c4"], [(p.text, warm.max_tokens) for p in base_prompts(warm)])
        for mode in modes:
            spec = BenchmarkSpec.model_validate({"dataset": "random", "input_len": args.input_len,
                                                 "max_tokens": args.output_len, "num_prompts": mode.prompts,
                                                 "concurrency": [mode.concurrency]})  # fmt: skip
            rows: dict[str, list[dict[str, Any]]] = {"k25": [], "vllm": []}
            # Round 0 is not measured: the engine still speeds up over its first full-size batches (shapes
            # it has not seen).
            seeds = [1000 + i for i in range(args.rounds + 1)]
            works = datasets(seeds, mode.prompts, args.input_len, args.output_len, args.range_ratio)
            for i, seed in enumerate(seeds):
                work = works[seed]
                _Evidence.seen.clear()
                _Evidence.first_text.clear()
                mine, theirs = paired(url, spec, work, seed, mode, Path(tmp) / f"ref-{i}.json")
                if i == 0:
                    continue
                rows["k25"].append(mine)
                rows["vllm"].append(theirs)
                if args.evidence and i == 1:
                    evidence(mine, theirs)
            report(mode, rows)


def report(mode: Mode, rows: dict[str, list[dict[str, Any]]]) -> None:
    gaps = [r["start_gap_ms"] for r in rows["k25"]]
    print(f"\n{mode.name}: {len(rows['k25'])} rounds of {mode.prompts} requests per tool, side by side; "
          f"k25-ctl's first send {min(gaps):+.1f} to {max(gaps):+.1f} ms after vLLM's")  # fmt: skip
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
    # The same prompt with the same output length, sent by both tools: request i against request i.
    diffs = [1000 * (x - y) for m, v in zip(rows["k25"], rows["vllm"], strict=True)
             for x, y in zip(m["ttfts"], v["ttfts"], strict=True) if x is not None and y]  # fmt: skip
    if diffs:
        q = statistics.quantiles(diffs, n=10)
        lower = sum(d < 0 for d in diffs) / len(diffs)
        print(f"TTFT per request, k25-ctl minus vLLM for the same request ({len(diffs)} pairs): median "
              f"{statistics.median(diffs):+.2f} ms, deciles 1/9 {q[0]:+.2f}/{q[-1]:+.2f} ms, k25-ctl lower in "
              f"{lower:.0%}")  # fmt: skip


if __name__ == "__main__":
    main()
