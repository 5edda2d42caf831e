"""What the fake engine is set up with (FakeConfig), its drafter (acceptance by topic, per request) and
its counters, gauges and histograms under the engines' real metric names."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from daemon.engines import sglang as sg
from daemon.engines import vllm as vl
from k25_sandbox.fake_park import ParkConfig


@dataclass
class FakeConfig:
    flavor: str  # vllm | sglang
    model: str
    rate: float  # output tokens per second
    spec_tokens: int  # 0: no speculative decoding
    acceptance: float  # per-draft-token acceptance (vLLM's definition)
    warmup_s: float
    deadlock: bool
    # Faults that strike while serving: after this many requests (the readiness probe is the first).
    crash_after: int | None = None  # the engine exits once that many requests have finished
    hang_after: int | None = None  # later requests never get a token; /health stays 200
    max_running: int | None = None  # more requests than this wait (counted as waiting) for a slot
    # Parking (the engines' sleep/wake endpoints, as each engine's flags enable them); None: none.
    park: ParkConfig | None = None
    answer_salt: str = ""  # another model: other answers to the same prompts
    logprob_noise: float = 0.0  # engine-like float noise on every logprob (nats, uniform +-)
    adapters: tuple[str, ...] = ()  # LoRA adapters served beside the base model
    # A drafter of known per-position rates (in place of `acceptance`): draft position i is accepted with
    # chance p_i (non-increasing), whatever the number of tokens drafted, as a real drafter's prefix is.
    position_acceptance: tuple[float, ...] = ()
    # What drafting costs: a step of k drafts takes (1 + draft_cost * k) / rate seconds and emits 1 +
    # accepted tokens (0: the stream runs at `rate` tokens/s whatever is accepted).
    draft_cost: float = 0.0
    # Acceptance by the prompt's topic (in place of `acceptance` for prompts of a listed topic): a drafter
    # accepts far more on code than on chat, so a verdict depends on the traffic it is measured on.
    topic_acceptance: dict[str, float] = field(default_factory=dict)

    # Batching: a decode step verifies 1 + spec_tokens tokens per running request, and takes
    # 1 + (those tokens) / batch_knee times as long as an empty engine's (0: no slowdown). A speculative
    # profile's step fills the batch 1 + k times faster: it pays most at low load and least at high load.
    batch_knee: float = 0.0
    # Requests that differ as a real drafter's do: each request's drafts start at a carry drawn from its
    # prompt (the same prompt, the same draws), so its accepted total varies around the mean (False: 0.5).
    draw_spread: bool = False

    def draw_for(self, prompt: str) -> Draw:
        carry = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16) / 2**32 if self.draw_spread else 0.5
        return Draw(self.acceptance_for(prompt), carry)

    def batch_factor(self, running: int) -> float:
        """How much longer a decode step takes with `running` requests in the batch (this one included)."""
        if not self.batch_knee:
            return 1.0
        return 1.0 + running * (1 + self.spec_tokens) / self.batch_knee

    def acceptance_for(self, prompt: str) -> float:
        return self.topic_acceptance.get(topic_of(prompt), self.acceptance)


# What makes a prompt "code" to the fake drafter: words and marks of programming requests.
_CODE = re.compile(
    r"\b(def|class|function|python|bash|script|implement|return|import|select|code|compile|regex|sql)\b"
    r"|```|[{};]",
    re.IGNORECASE,
)


def topic_of(prompt: str) -> str:
    """The fake drafter's idea of a prompt's topic: code, or chat (everything else)."""
    return "code" if _CODE.search(prompt) else "chat"


def parse_topics(text: str) -> dict[str, float]:
    """`code=0.7,chat=0.1` -> {"code": 0.7, "chat": 0.1}."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        topic, _, value = part.partition("=")
        out[topic.strip()] = float(value)
    return out


GOLDEN = (5**0.5 - 1) / 2


def _counter(name: str) -> str:
    return name.removesuffix("_total")


class Draw:
    """One request's drafts made deterministic: each step accepts k*acceptance tokens on average, the
    fractions carried over (per request: concurrent requests of other topics do not mix). The carry starts
    at one half: a request's accepted total is rounded, not floored, so the counters' rate stays unbiased."""

    def __init__(self, acceptance: float, carry: float = 0.5) -> None:
        self.acceptance = acceptance
        self.carry = carry

    def accepted(self, k: int) -> int:
        self.carry += k * self.acceptance
        n = min(k, int(self.carry))
        self.carry -= n
        return n


class Stats:
    """The engine's counters, gauges and histograms, with its real metric names."""

    def __init__(self, cfg: FakeConfig) -> None:
        self.cfg = cfg
        self.steps = 0
        self.tokens = 0
        self.started = 0  # requests that asked for tokens
        self.finished = 0
        self.registry = CollectorRegistry()
        r = self.registry
        if cfg.flavor == "vllm":
            labels = {"model_name": cfg.model, "engine": "0"}
            names = (vl.M_PROMPT, vl.M_GENERATION, vl.M_TTFT, vl.M_ITL, vl.M_E2E, vl.M_RUNNING, vl.M_WAITING)
        else:
            labels = {"model_name": cfg.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
            names = (sg.M_PROMPT, sg.M_GENERATION, sg.M_TTFT, sg.M_ITL, sg.M_E2E, sg.M_RUNNING, sg.M_WAITING)
        self.labels = labels
        keys = list(labels)
        prompt, gen, ttft, itl, e2e, running, waiting = names
        self.prompt = Counter(_counter(prompt), "prompt tokens", keys, registry=r).labels(**labels)
        self.gen = Counter(_counter(gen), "generation tokens", keys, registry=r).labels(**labels)
        self.ttft = Histogram(ttft, "time to first token", keys, registry=r).labels(**labels)
        self.itl = Histogram(itl, "inter-token latency", keys, registry=r).labels(**labels)
        self.e2e = Histogram(e2e, "request latency", keys, registry=r).labels(**labels)
        self.running = Gauge(running, "running requests", keys, registry=r).labels(**labels)
        self.waiting = Gauge(waiting, "waiting requests", keys, registry=r).labels(**labels)
        kv_usage = vl.M_KV_USAGE if cfg.flavor == "vllm" else sg.M_KV_USAGE
        self.kv = Gauge(kv_usage, "KV cache usage (0..1)", keys, registry=r).labels(**labels)
        if cfg.flavor == "vllm":
            self.requests = Counter(
                _counter(vl.M_SUCCESS), "finished", [*keys, "finished_reason"], registry=r
            )
            self.drafts = Counter(_counter(vl.M_DRAFTS), "drafts", keys, registry=r).labels(**labels)
            self.draft_tokens = Counter(_counter(vl.M_DRAFT_TOKENS), "draft tokens", keys, registry=r).labels(
                **labels
            )
            self.accepted = Counter(_counter(vl.M_ACCEPTED), "accepted", keys, registry=r).labels(**labels)
            self.per_pos = Counter(
                _counter(vl.M_ACCEPTED_POS), "accepted per pos", [*keys, "position"], registry=r
            )
        else:
            self.requests = Counter(_counter(sg.M_REQUESTS), "requests", keys, registry=r)
            self.accept_len = Gauge(sg.M_ACCEPT_LENGTH, "accept length", keys, registry=r).labels(**labels)
            self.accept_rate = Gauge(sg.M_ACCEPT_RATE, "accept rate", keys, registry=r).labels(**labels)
            self.throughput = Gauge(sg.M_THROUGHPUT, "throughput", keys, registry=r).labels(**labels)

    def step(self, room: int, draw: Draw) -> int:
        """One decode step of a request: how many tokens it emits (1 + accepted drafts, at most `room`: the
        request's end). vLLM's counters count every accepted draft; SGLang's lifetime mean counts emitted
        tokens."""
        k = self.cfg.spec_tokens
        accepted = 0
        if k and self.cfg.position_acceptance:
            # One uniform draw per step (a golden-ratio sequence: deterministic, evenly spread), accepted
            # up to the first position whose rate it exceeds: P(position i accepted) = p_i.
            u = (self.steps * GOLDEN) % 1.0
            accepted = sum(1 for p in self.cfg.position_acceptance[:k] if u < p)
        elif k:
            accepted = draw.accepted(k)
        if k and self.cfg.flavor == "vllm":
            self.drafts.inc()
            self.draft_tokens.inc(k)
            self.accepted.inc(accepted)
            for pos in range(k):
                self.per_pos.labels(**self.labels, position=str(pos)).inc(1 if pos < accepted else 0)
        self.steps += 1
        self.tokens += min(1 + accepted, room)
        if k and self.cfg.flavor == "sglang":
            length = self.tokens / self.steps
            self.accept_len.set(length)
            self.accept_rate.set(length / (k + 1))
        return min(1 + accepted, room)


def count_request(stats: Stats, cfg: FakeConfig) -> None:
    if cfg.flavor == "vllm":
        stats.requests.labels(**stats.labels, finished_reason="length").inc()
    else:
        stats.requests.labels(**stats.labels).inc()
    stats.finished += 1
    if cfg.crash_after is not None and stats.finished >= cfg.crash_after:
        # The crash-after-ready fault: exit as a crashed engine does (the answer just sent gets out first).
        asyncio.get_running_loop().call_later(0.05, os._exit, 1)
