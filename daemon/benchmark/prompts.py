"""Prompt sets: a built-in set written for this project (chat, code, math, long reasoning), synthetic
prompts of a given length, or the operator's own. A per-run salt keeps reruns out of the prefix cache."""

from __future__ import annotations

import hashlib
import random
import secrets
from dataclasses import dataclass

from daemon.benchmark.spec import BenchmarkSpec

BUILTIN: tuple[tuple[str, str], ...] = (
    ("chat", "Explain to a new operator what a GPU inference server does, in three short paragraphs."),
    ("chat", "Write a polite reply to a colleague asking why last night's model deployment was rolled back."),
    ("chat", "Summarise the trade-offs between latency and throughput when serving a large language model."),
    ("code", "Write a Python function that merges overlapping intervals and explain its complexity."),
    ("code", "Implement a thread-safe LRU cache in Python with get and put, then show a short example."),
    ("code", "Write a bash script that finds the ten largest files under a directory and prints sizes."),
    ("math", "A train leaves at 14:05 and travels 312 km at 96 km/h. When does it arrive? Show your steps."),
    ("math", "Prove that the sum of the first n odd numbers is n squared, then check it for n = 7."),
    ("math", "Solve for x: 3x^2 - 12x + 9 = 0. Then explain what the discriminant tells you here."),
    (
        "reasoning",
        "A host has 8 GPUs and three serving profiles. Baseline gives 82 tokens/s, a speculative "
        "profile gives 55 tokens/s with 15% draft acceptance, a third gives 148 tokens/s. Reason step "
        "by step about what could make speculative decoding slower than baseline and how you would "
        "verify each cause.",
    ),
    (
        "reasoning",
        "Plan a migration of a production inference service to new hardware without downtime. "
        "List the risks, the order of steps, how to roll back at each step, and what you would measure.",
    ),
    (
        "reasoning",
        "Three engineers disagree about why a server deadlocks after loading. One blames the "
        "driver, one the scheduler, one shared memory left behind by a crash. Design experiments that tell "
        "these apart, and explain what each outcome would prove.",
    ),
)

# Short common words: each is about one token for the usual tokenizers (lengths are approximate).
_WORDS = (
    "the of and to in is it that for on was with as at be by this had not are but from or have an they "
    "which one you were her all she there would their we him been has when who will more no if out so "
    "said what up its about into than them can only other new some could time these two may then do first "
    "any my now such like our over man me even most made after also did many before must through back"
).split()


@dataclass(frozen=True)
class Prompt:
    text: str
    category: str


def base_prompts(spec: BenchmarkSpec) -> list[Prompt]:
    """The unsalted prompts, one per measured request (the set cycles when num_prompts is larger)."""
    if spec.dataset == "custom":
        pool = [Prompt(p, "custom") for p in spec.prompts or []]
    elif spec.dataset == "random":
        rng = random.Random(spec.seed)  # noqa: S311 - reproducible synthetic text, not security
        pool = [
            Prompt(" ".join(rng.choice(_WORDS) for _ in range(spec.input_len)), "random")
            for _ in range(min(spec.num_prompts, 1024))
        ]
    else:
        pool = [Prompt(text, cat) for cat, text in BUILTIN]
    return [pool[i % len(pool)] for i in range(spec.num_prompts)]


def prompt_set_hash(spec: BenchmarkSpec) -> str:
    h = hashlib.sha256()
    for p in base_prompts(spec):
        h.update(p.text.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def new_salt() -> str:
    return secrets.token_hex(4)


def salted(text: str, salt: str | None, index: int) -> str:
    """A prefix unique to this run and request: the engine's prefix cache cannot serve it."""
    return f"[{salt}-{index}] {text}" if salt else text
