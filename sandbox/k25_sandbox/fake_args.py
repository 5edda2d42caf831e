"""The fake engine's command line: vLLM's or SGLang's own flags that k25-ctl renders, and the fake's knobs
(pace, faults on demand, speculative decoding, parking). Its help is what k25-ctl's flag check reads in the
sandbox (layout.py keys the sandboxes' shared cache by this file too)."""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

from daemon.engines import sglang as sg
from daemon.engines import vllm as vl
from k25_sandbox import fake_install

FAULTS = (
    "crash-loading",
    "deadlock",
    "ignore-sigterm",
    "orphan",
    "leak-shm",
    "crash-after-ready",
    "hang-after-ready",
    # Parking's faults, as the engines' trackers report them.
    "sleep-keeps-memory",  # /sleep answers 200 and the GPU memory stays held (vllm#47654)
    "wake-fails",  # the wake OOMs (vllm#13941, #34600)
    "wake-zero-acceptance",  # the drafter's weights are not reloaded: acceptance 0 (vllm#52479)
    "wake-corrupts",  # a level-1 wake that restores garbage: /health 200, fluent nonsense
    "no-collective-rpc",  # no /collective_rpc (an older vLLM, or dev mode off): no reload_weights
    # A wake subtly wrong: what only the fingerprint (logprobs) shows.
    "wake-drifts",  # logprobs moved, the greedy tokens unchanged
    "wake-corrupts-shard",  # one of 8 shards restored wrong: one position in 8 moves
    "stale-prefix-cache",  # no prefix-cache reset: blocks indexed before the sleep are read (vllm#17103)
    "drifts-after-cycles",  # from the --fault-after'th wake on, logprobs move (torch_memory_saver#71)
    "wake-then-fails",  # the wake answers 200, then every request 500 with /health 200 (vllm#49237)
    "wake-loses-lora",  # the LoRA adapters not restored: they answer as the base model (vllm#53888)
)
PARK_FAULTS = frozenset(FAULTS[-11:])


def _drafter_args(p: argparse.ArgumentParser) -> None:
    """Speculative decoding: tokens drafted, accepted (by topic) and what drafting costs."""
    p.add_argument("--spec-tokens", type=int, default=0, help="speculative tokens per step (0: none)")
    p.add_argument("--acceptance", type=float, default=0.0, help="draft token acceptance rate (vLLM's)")
    p.add_argument(
        "--position-acceptance",
        default="",
        help="per-position acceptance rates p0,p1,... (non-increasing; replaces --acceptance)",
    )
    p.add_argument(
        "--topic-acceptance",
        default="",
        help="acceptance by the prompt's topic, e.g. code=0.7,chat=0.1 (others: --acceptance)",
    )
    p.add_argument(
        "--draft-cost",
        type=float,
        default=0.0,
        help="a step of k drafts takes (1 + cost*k)/rate s and emits 1 + accepted tokens",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    words = sys.argv[1:] if argv is None else argv
    flavor = next((b for a, b in itertools.pairwise(words) if a == "--flavor"), "vllm")
    p = argparse.ArgumentParser(prog="fake_engine", description=__doc__)
    p.add_argument("--flavor", choices=("vllm", "sglang"), required=True)
    # Its entry, as the real engine's: `vllm serve`, `python -m sglang.launch_server` (fake_install.py).
    p.add_argument("entry", nargs="?", choices=tuple(fake_install.ENTRY.values()))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", "--model-path", dest="model", default="/models/fake")
    p.add_argument("--served-model-name", default="kimi-k2.5")
    p.add_argument("--load-seconds", type=float, default=2.0, help="time the weight loading takes")
    p.add_argument("--shards", type=int, default=8, help="checkpoint shards the progress bar counts")
    p.add_argument(
        "--warmup-seconds", type=float, default=0.5, help="SGLang: /health 503 this long after HTTP"
    )
    p.add_argument("--rate", type=float, default=80.0, help="output tokens per second")
    _drafter_args(p)
    p.add_argument("--workers", type=int, default=0, help="TP workers (default: one per visible GPU)")
    p.add_argument(
        "--device-dir", type=Path, help="where nvidiaN files live (default: from the daemon's settings)"
    )
    p.add_argument("--shm-dir", type=Path, default=Path("/dev/shm"))
    p.add_argument(
        "--weights", type=Path, help="read this folder's *.safetensors the way a lazy mmap loader does"
    )
    # Parking, enabled by the engine's own flags (as k25-ctl renders them): vLLM's sleep mode, SGLang's
    # memory saver, and its CPU backup of the weights (without it a resume restores garbage).
    p.add_argument(vl.FLAG_SLEEP_MODE, dest="sleep_mode", action="store_true")
    p.add_argument(sg.FLAG_MEMORY_SAVER, dest="memory_saver", action="store_true")
    p.add_argument(sg.FLAG_WEIGHTS_CPU_BACKUP, dest="cpu_backup", action="store_true")
    p.add_argument("--wake-gbps", type=float, default=20.0, help="parking: weights back at this rate")
    p.add_argument("--reload-gbps", type=float, default=100.0, help="reload_weights reads them at this rate")
    p.add_argument("--pin-gbps", type=float, default=0.0, help="a first park pins its backup at this rate")
    p.add_argument(
        "--pin-host-gbps", type=float, default=0.0, help="the host's ceiling for all workers (0: none)"
    )
    p.add_argument("--pin-gbps-registered", type=float, default=0.0, help="per worker, registered pinning")
    p.add_argument("--pin-host-gbps-registered", type=float, default=0.0, help="its ceiling (0: none)")
    p.add_argument("--pin-mib", type=int, default=0, help="the host RAM that backup really takes (MiB)")
    # LoRA adapters, by the engine's own flags: vLLM --lora-modules, SGLang --lora-paths (name=path each).
    p.add_argument(vl.FLAG_ENABLE_LORA, dest="enable_lora", action="store_true")
    p.add_argument(vl.FLAG_LORA_MODULES, sg.FLAG_LORA_PATHS, dest="lora", nargs="+", default=[])
    p.add_argument("--logprob-noise", type=float, default=0.0, help="engine-like float noise on logprobs")
    p.add_argument("--answer-salt", default="", help="answer other tokens (another model, a broken drafter)")
    p.add_argument("--max-running", type=int, default=0, help="requests run at once; more wait (0: no cap)")
    p.add_argument(
        "--draw-spread", action="store_true", help="each request's drafts start where its prompt says"
    )
    p.add_argument(
        "--batch-knee",
        type=float,
        default=0.0,
        help="batching: a step takes 1 + (running x (1 + spec tokens)) / knee times longer (0: no slowdown)",
    )
    p.add_argument("--fault", action="append", choices=FAULTS, default=[])
    p.add_argument(
        "--fault-after", type=int, default=7, help="*-after-ready: requests served first (probe incl.)"
    )
    p.add_argument(
        "--rendered",
        action="store_true",
        help="run by a sandbox shim in place of the real engine: the engine's other flags are ignored",
    )
    if fake_install.has_old_rate(flavor):
        p.add_argument(fake_install.OLD_RATE, type=float, dest="rate", help="deprecated: use --rate")
    real = p.add_argument_group("the real engine's flags k25-ctl renders (accepted, ignored)")
    for flag in fake_install.RENDERED_FLAGS[flavor]:
        real.add_argument(flag, nargs="?", dest="real_" + flag.strip("-"), metavar="VALUE", help="ignored")
    if any(w in ("-h", "--help") or w.startswith("--help=") for w in words):
        p.print_help()  # vLLM's `--help=all` and SGLang's `--help`: every flag, in argparse's format
        sys.exit(0)
    args, rest = p.parse_known_args(argv)
    if rest and not args.rendered:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    return args
