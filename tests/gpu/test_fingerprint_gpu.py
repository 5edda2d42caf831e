"""Issue 52 on a real GPU (the device tool's H200): a torch engine, a small bf16 language model whose layers
are split in 8 tensor-parallel shards, answers the known-answer way (greedy, top-5 logprobs of every
token). It is recorded twice cold (the tolerance), parked as vLLM's CuMemAllocator does (weights backed up
into pinned host memory, the GPU copies freed) and woken by the copy back. A clean wake is not flagged;
a wake after which one bit of one shard's weights is flipped is, by the daemon's own judge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from daemon.engines.answers import Answer, AnswerKind
from daemon.proving import fingerprint
from daemon.proving.agreement import judge
from daemon.proving.fingerprint import FLOOR

torch = pytest.importorskip("torch") if __name__ != "__main__" else __import__("torch")
pytestmark = pytest.mark.gpu
SHARDS, VOCAB, HIDDEN, TOKENS = 8, 4096, 1024, 12
PROMPTS = ((11, 57, 301, 9), (4000, 12, 77), tuple(range(100, 164)))
FLIPS = (("down.3", 7), ("up.5", 15))  # an exponent's lowest bit (x2 or /2); a sign


class Engine:
    """Embedding, two sharded MLP layers and a sharded output projection, in bf16 on the GPU."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)

        def w(*shape: int, scale: float) -> Any:
            return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16).cuda()

        self.weights = {
            "embed": w(VOCAB, HIDDEN, scale=1.0),
            **{f"up.{s}": w(HIDDEN // SHARDS, HIDDEN, scale=HIDDEN**-0.5) for s in range(SHARDS)},
            **{
                f"down.{s}": w(HIDDEN, HIDDEN // SHARDS, scale=(HIDDEN // SHARDS) ** -0.5)
                for s in range(SHARDS)
            },
            **{f"out.{s}": w(VOCAB // SHARDS, HIDDEN, scale=4 * HIDDEN**-0.5) for s in range(SHARDS)},
        }
        self.backup: dict[str, Any] = {}

    def _logits(self, ids: list[int]) -> Any:
        wt = self.weights
        x = wt["embed"][ids].mean(0)
        h = torch.cat([torch.nn.functional.gelu(wt[f"up.{s}"] @ x) for s in range(SHARDS)])
        x = x + sum(
            wt[f"down.{s}"] @ h[s * (HIDDEN // SHARDS) : (s + 1) * (HIDDEN // SHARDS)] for s in range(SHARDS)
        )
        return torch.cat([wt[f"out.{s}"] @ x for s in range(SHARDS)]).float()

    def answer(self, prompt: tuple[int, ...]) -> Answer:
        ids, tokens, positions = list(prompt), [], []
        for _ in range(TOKENS):
            lp = torch.log_softmax(self._logits(ids), dim=-1)
            top = torch.topk(lp, 5)
            chosen = int(top.indices[0])
            alts = tuple((str(int(i)), float(v)) for v, i in zip(top.values, top.indices, strict=True))
            positions.append((float(lp[chosen]), alts))
            tokens.append(str(chosen))
            ids.append(chosen)
        return Answer(
            AnswerKind.COMPLETION,
            ",".join(map(str, prompt)),
            " ".join(tokens),
            tuple(tokens),
            tuple(positions),
        )

    def ask(self) -> tuple[Answer, ...]:
        return tuple(self.answer(p) for p in PROMPTS)

    def park(self) -> None:
        for name, t in self.weights.items():
            self.backup[name] = t.to("cpu").pin_memory()
        self.weights = {}
        torch.cuda.empty_cache()

    def wake(self) -> None:
        self.weights = {name: t.cuda(non_blocking=True) for name, t in self.backup.items()}
        torch.cuda.synchronize()


def _flip(t: Any, bit: int, at: int | None = None) -> int:
    """Flip one bit of one element (the largest-magnitude one unless `at`), in its bf16 pattern in place."""
    flat = t.view(-1)
    i = int(flat.float().abs().argmax()) if at is None else at
    raw = flat.view(torch.int16)
    raw[i] = raw[i] ^ (1 << bit) if bit < 15 else raw[i] ^ -32768
    return i


def main() -> None:
    """Run by the test in a process of its own (the test's process must hold no CUDA context: the teardown
    tests that follow verify the GPU is clean). Prints each set of answers as JSON."""
    engine = Engine()
    out: dict[str, Any] = {"recorded": engine.ask(), "again": engine.ask()}
    engine.park()
    engine.wake()
    out["clean"] = engine.ask()
    for name, bit in FLIPS:
        engine.park()
        engine.wake()
        at = _flip(engine.weights[name], bit)
        out[f"{name}:{bit}"] = engine.ask()
        _flip(engine.weights[name], bit, at)  # back as it was
        out[f"{name}:{bit}:back"] = engine.ask()
    print(json.dumps({k: [a.as_json() for a in v] for k, v in out.items()}))


def test_a_clean_wake_passes_and_one_flipped_bit_in_one_shard_is_caught(nvml: object) -> None:
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-m", "tests.gpu.test_fingerprint_gpu"]
    run = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=300, check=True)
    got = {k: tuple(Answer.from_json(a) for a in v) for k, v in json.loads(run.stdout).items()}
    recorded = got["recorded"]
    tolerance = fingerprint.tolerance(recorded, got["again"])
    twice = fingerprint.largest(recorded, got["again"])
    print(f"two cold asks differ by {twice:g}: tolerance {tolerance:g} (floor {FLOOR:g})")
    clean = judge(got["clean"], recorded, tolerance)
    moved = fingerprint.largest(got["clean"], recorded)
    print(f"clean wake: logprobs moved {moved:g}: {clean or 'equal within the tolerance'}")
    assert clean is None
    for name, bit in FLIPS:
        said = judge(got[f"{name}:{bit}"], recorded, tolerance)
        largest = fingerprint.largest(got[f"{name}:{bit}"], recorded)
        print(f"bit {bit} of one weight of shard {name}: largest logprob move {largest:.4g}: {said}")
        assert said is not None
        assert judge(got[f"{name}:{bit}:back"], recorded, tolerance) is None


if __name__ == "__main__":
    main()
