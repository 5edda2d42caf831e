"""Park and wake one engine N times in a row, the known answer (ids and top-5 logprobs) checked after each
wake (issue 52), in a sandbox: a fake vLLM at the seed's single-stream 82.5 tok/s with engine-like float
noise on its logprobs. Prints each cycle's wake seconds and check seconds (the `known_answer` load stage)
and whether it drifted (the check failed: stopped and started cold). `--drift-after K`: the engine's
weights drift from the K-th wake on (torch_memory_saver#71), to show the cycle it is caught at. Needs root
(the sandbox). `python perf/cycles.py [--cycles 20] [--drift-after K]`"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port

RATE = 82.5  # the seed's single-stream tokens/s


def _go(c: httpx.Client, name: str) -> dict[str, Any]:
    run: dict[str, Any] = c.post(f"/profiles/{name}/activate", params={"wait": True}).json()
    assert run.get("outcome") == "active", run
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument(
        "--drift-after", type=int, default=0, help="the weights drift from this wake on (0: never)"
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="k25-cycles-") as tmp:
        extra, models = Path(tmp, "profiles"), Path(tmp, "models")
        extra.mkdir()
        make_models(models)
        faults = ("drifts-after-cycles",) if args.drift_after else ()
        text = fake_engine_profile("cycler", flavor="vllm", port=free_port(), models=models, load_seconds=2.0,
                                   rate=RATE, park="sleep", wake_gbps=100.0, faults=faults,
                                   fault_after=args.drift_after or None, engine_args=("--logprob-noise", "0.004"))  # fmt: skip
        (extra / "cycler.toml").write_text(text)
        info = sbx.up(profiles=extra, load_seconds=0.5, binds=(models,))
        try:
            c = httpx.Client(
                base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"}
            )
            _go(c, "cycler")
            rows = []
            for cycle in range(1, args.cycles + 1):
                _go(c, "vllm-eagle3")
                back = _go(c, "cycler")
                stages = back["load_stages"] or {}
                drifted = any(
                    "wake failed" in (e["detail"] or "") for e in back["events"] if e["phase"] == "stop"
                )
                rows.append((cycle, stages.get("wake"), stages.get("known_answer"), drifted))
        finally:
            sbx.down(info)
    print(
        f"{args.cycles} park/wake cycles of a fake vLLM at {RATE} tok/s (known answer: ids + top-5 logprobs)"
    )
    print(f"{'cycle':>5} {'wake s':>7} {'check s':>8}  drifted")
    for cycle, wake, check, drifted in rows:
        w = f"{wake:7.2f}" if wake is not None else "      -"
        print(f"{cycle:>5} {w} {check or 0:8.2f}  {'yes: stopped, started cold' if drifted else 'no'}")
    checks = [ch for _, w, ch, d in rows if w is not None and ch is not None and not d]
    if checks:
        print(
            f"check after a clean wake: median {statistics.median(checks):.3f}s, max {max(checks):.3f}s (target <= 0.5 s)"
        )
    caught = [cycle for cycle, *_, d in rows if d]
    print(f"drifted at cycle(s): {caught or 'none'}")


if __name__ == "__main__":
    main()
