"""Prompt sets: a built-in set written for this project (chat, code, math, long reasoning), synthetic
prompts of a given length, the operator's own, or a stored dataset replayed (its prompts, parameters,
categories, output lengths and arrivals). A per-run salt keeps reruns out of the prefix cache."""

from __future__ import annotations

import hashlib
import random
import secrets
from dataclasses import dataclass, field

from daemon.core.jsontypes import RequestBody, StoredJson
from daemon.datasets.service import Replay
from daemon.datasets.shapes import Endpoint, prompt_text
from daemon.measure.spec import BenchmarkSpec

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
    # A dataset's request: its endpoint, body (prompt or messages, and params), length and arrival.
    endpoint: Endpoint | None = None
    body: RequestBody | None = None
    output_tokens: int | None = None
    offset_s: float | None = None


@dataclass(frozen=True)
class PromptSet:
    """The prompts of one benchmark, one per measured request, with the hash compare matches on and what
    the benchmark's provenance says of them."""

    prompts: list[Prompt]
    hash: str
    provenance: StoredJson = field(default_factory=dict)

    @property
    def categories(self) -> list[str]:
        return [p.category for p in self.prompts]


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


def builtin_set(spec: BenchmarkSpec) -> PromptSet:
    return PromptSet(base_prompts(spec), prompt_set_hash(spec))


def replay_set(spec: BenchmarkSpec, replay: Replay) -> PromptSet:
    """`num_prompts` requests of the dataset in its order (cycled when it has fewer; a cycle's arrivals
    follow the previous one's), each with its own parameters and length: the dataset's where it knows it
    (imported, or the engine's mean over a captured window), else the request's own max_tokens, else the
    spec's; never more than the spec's max_tokens."""
    if spec.pace is not None and not replay.paced:
        raise ValueError(f"dataset {replay.name!r} has no arrival times: pace needs a captured dataset")
    items = replay.prompts
    offsets = [p.offset_s or 0.0 for p in items]
    span = offsets[-1] + (offsets[-1] / (len(items) - 1) if len(items) > 1 else 1.0)
    out = []
    for i in range(spec.num_prompts):
        p = items[i % len(items)]
        params = p.body.get("params") or {}
        own = params.get("max_tokens") or params.get("max_completion_tokens")
        mean = round(replay.output_mean) if replay.output_mean else None
        length = min(spec.max_tokens, int(p.output_tokens or mean or own or spec.max_tokens))
        offset = None if p.offset_s is None else p.offset_s + (i // len(items)) * span
        out.append(Prompt(prompt_text(p.body), p.category or "-", p.endpoint, p.body, length, offset))
    h = hashlib.sha256(f"{replay.sha256}:{spec.num_prompts}".encode()).hexdigest()[:16]
    provenance: StoredJson = {
        "dataset": replay.name,
        "dataset_sha256": replay.sha256,
        "output_lengths": f"{replay.lengths}; at most max_tokens ({spec.max_tokens})",
        "ignore_eos": spec.eos_ignored,
        "pace": spec.pace,
    }
    return PromptSet(out, h, provenance)


def new_salt() -> str:
    return secrets.token_hex(4)


def salted(text: str, salt: str | None, index: int) -> str:
    """A prefix unique to this run and request: the engine's prefix cache cannot serve it."""
    return f"[{salt}-{index}] {text}" if salt else text
