"""Capacity under an SLO (issue 53), pure: the highest request rate at which a profile meets its SLO, found
the way `vllm bench sweep`'s serve_sla does, with the guards a production host needs. Bracketing from the
start rate, each step `factor` times the last proven rate while the SLO holds (down by the factor while it
does not), then bisection (geometric) until the highest rate that met it and the lowest that missed are
within `resolution` of each other. No step is ever more than `factor` above the highest rate proven.

A step that shows the engine over-saturated ends the search there, whatever its SLO figures: errors that
the proven rate did not have, or a queue that grows without bound (the level's late requests wait for
their first token `QUEUE_GROWTH` times longer than its early ones while the engine completes requests
slower than they arrive), the signal GuideLLM's sweep stops on (guidellm#242).

The answer: capacity, the highest rate proven, with the bracket it lies in; an estimate inside the bracket
(where the limiting figure crosses its bound, interpolated in log rate); the limiting metric (the bound
nearest its limit, or missed); and the knee, the first rate at which the limiting figure grew faster than
the rate (log-log slope above 1): where latency starts paying for load."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict, Field

from daemon.core.jsontypes import VllmSummary
from daemon.measure.metrics import RequestRecord, percentile
from daemon.measure.slo import Slo
from daemon.measure.slo import parse as parse_slo
from daemon.store.bench import BenchmarkView

QUEUE_GROWTH = 2.0  # late requests' TTFT over early ones' that says the queue is growing
KEEPING_UP = 0.9  # completions per second over arrivals per second below which the engine falls behind
MIN_QUEUE_S = 0.05  # a TTFT growth smaller than this (seconds) is noise, not a queue


class CapacitySearch(BaseModel):
    """How a capacity search steps (a benchmark spec's `capacity`)."""

    model_config = ConfigDict(extra="forbid")

    start_rate: float = Field(
        default=1.0, gt=0, le=100_000, description="the first step's request rate (req/s)"
    )
    factor: float = Field(
        default=2.0, gt=1, le=10, description="bracketing: each step this many times the last"
    )
    resolution: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="stop when the bracket's ends are within this share of each other",
    )
    max_steps: int = Field(default=12, ge=2, le=64, description="stop after this many steps, answer or not")
    max_rate: float | None = Field(default=None, gt=0, le=100_000, description="never step above this rate")


@dataclass(frozen=True)
class StepFigures:
    """One step of a search, as its stored level says."""

    rate: float
    met: bool
    missed: list[str]
    achieved: float  # completed requests per second
    queue_growth: float | None  # late requests' median TTFT over early ones'
    queue_s: float  # how much (seconds) the late requests' median TTFT exceeds the early ones'
    failed: int
    limits: dict[str, float]  # each bound's key -> the level's figure over the bound (1: at the limit)


@dataclass
class Capacity:
    """What a search found."""

    capacity: float | None  # the highest rate that met the SLO (None: not even the lowest step)
    lowest_missed: float | None  # the lowest rate that missed it (None: none did)
    estimate: float | None  # inside the bracket, where the limiting figure meets its bound
    limiting: str | None  # the bound that gave out first
    knee: float | None
    reason: str
    steps: list[StepFigures] = field(default_factory=list)

    @property
    def interval(self) -> tuple[float | None, float | None]:
        return self.capacity, self.lowest_missed

    def text(self) -> str:
        if self.capacity is None:
            return f"no rate met the SLO ({self.reason})"
        upper = f"{self.lowest_missed:.3g}" if self.lowest_missed is not None else "not found"
        est = f" (estimate {self.estimate:.3g})" if self.estimate is not None else ""
        lim = f", limited by {self.limiting}" if self.limiting else ""
        knee = f", knee at {self.knee:.3g} req/s" if self.knee is not None else ""
        found = f"capacity {self.capacity:.3g} req/s [{self.capacity:.3g}, {upper}]"
        return f"{found}{est}{lim}{knee}: {self.reason}"


def queue_trend(records: Sequence[RequestRecord]) -> tuple[float | None, float]:
    """The median TTFT of the level's last third of requests (by when they were sent) over its first
    third's, and the difference in seconds; (None, 0) with too few answers."""
    done = sorted((r for r in records if r.ok and r.ttft is not None), key=lambda r: r.sent)
    third = len(done) // 3
    if third < 2:
        return None, 0.0
    early = percentile([r.ttft or 0.0 for r in done[:third]], 50)
    late = percentile([r.ttft or 0.0 for r in done[-third:]], 50)
    return (late / early if early > 0 else None), late - early


def figures(rate: float, summary: VllmSummary, slo: Slo) -> StepFigures:
    limits = {}
    for b in slo.bounds:
        value = summary.get(b.key)
        if value is not None:
            limits[b.key] = float(value) / b.ms
    duration = float(summary.get("duration") or 0.0)
    growth = summary.get("queue_growth")
    return StepFigures(
        rate=rate,
        met=bool(summary.get("slo_met")),
        missed=list(summary.get("slo_missed") or []),
        achieved=int(summary.get("completed") or 0) / duration if duration > 0 else 0.0,
        queue_growth=None if growth is None else float(growth),
        queue_s=float(summary.get("queue_growth_s") or 0.0),
        failed=int(summary.get("failed") or 0),
        limits=limits,
    )


def saturated(step: StepFigures, proven: StepFigures | None) -> str | None:
    """Why this step shows an over-saturated engine; None: it does not."""
    if step.failed and (proven is None or not proven.failed):
        return f"{step.failed} request(s) failed at {step.rate:.3g} req/s"
    growing = (
        step.queue_growth is not None and step.queue_growth >= QUEUE_GROWTH and step.queue_s >= MIN_QUEUE_S
    )
    if growing and step.achieved < KEEPING_UP * step.rate:
        return (
            f"over-saturated at {step.rate:.3g} req/s: {step.achieved:.3g} req/s completed while the queue "
            f"grew (late requests waited {step.queue_growth:.1f}x as long for a first token)"
        )
    return None


class Search:
    """The state of one capacity search: which rate to measure next, and what the steps showed."""

    def __init__(self, cfg: CapacitySearch) -> None:
        self.cfg = cfg
        self.steps: list[StepFigures] = []
        self.stopped: str | None = None
        self.over = False  # stopped by an over-saturated engine

    @property
    def proven(self) -> StepFigures | None:
        met = [s for s in self.steps if s.met]
        return max(met, key=lambda s: s.rate) if met else None

    @property
    def missed(self) -> StepFigures | None:
        out = [s for s in self.steps if not s.met]
        return min(out, key=lambda s: s.rate) if out else None

    def next_rate(self) -> float | None:
        """The next step's rate; None: the search is over (`stopped` says why)."""
        if self.stopped is not None:
            return None
        cfg, lo, hi = self.cfg, self.proven, self.missed
        if len(self.steps) >= cfg.max_steps:
            self.stopped = f"the step limit ({cfg.max_steps}) was reached"
            return None
        if not self.steps:
            return _capped(cfg.start_rate, cfg.max_rate)
        if hi is None and lo is not None:  # bracketing up
            if cfg.max_rate is not None and lo.rate >= cfg.max_rate:
                self.stopped = f"the SLO held up to the highest rate allowed ({cfg.max_rate:g} req/s)"
                return None
            return _capped(lo.rate * cfg.factor, cfg.max_rate)
        if lo is None or hi is None:  # every step so far missed: step down
            return (hi or self.steps[-1]).rate / cfg.factor
        if hi.rate <= lo.rate * (1 + cfg.resolution):
            self.stopped = f"bracketed to {cfg.resolution:.0%}"
            return None
        return math.sqrt(lo.rate * hi.rate)

    def observe(self, step: StepFigures) -> None:
        """One step measured; an over-saturated engine ends the search here."""
        why = saturated(step, self.proven)
        if why is not None:
            step = replace(step, met=False, missed=[*step.missed, why])
            self.stopped, self.over = why, True
        self.steps.append(step)

    def result(self) -> Capacity:
        lo, hi = self.proven, self.missed
        limiting = "saturation" if self.over else _limiting(lo, hi)
        return Capacity(
            capacity=lo.rate if lo else None,
            lowest_missed=hi.rate if hi else None,
            estimate=_estimate(lo, hi, limiting),
            limiting=limiting,
            knee=knee(self.steps, limiting),
            reason=self.stopped or "stopped before it was done",
            steps=list(self.steps),
        )


def _capped(rate: float, max_rate: float | None) -> float:
    return min(rate, max_rate) if max_rate is not None else rate


def _limiting(lo: StepFigures | None, hi: StepFigures | None) -> str | None:
    """The bound nearest its limit at the lowest miss (else at the highest proven rate)."""
    at = hi or lo
    if at is None or not at.limits:
        return None
    return max(at.limits, key=lambda k: at.limits[k])


def _estimate(lo: StepFigures | None, hi: StepFigures | None, key: str | None) -> float | None:
    """Where, between the bracket's ends, the limiting figure reaches its bound (log-linear)."""
    if lo is None or hi is None or key is None or key not in lo.limits or key not in hi.limits:
        return None
    a, b = lo.limits[key], hi.limits[key]
    if not (0 < a <= 1 < b):
        return None
    t = math.log(1 / a) / math.log(b / a)
    return math.exp(math.log(lo.rate) + t * (math.log(hi.rate) - math.log(lo.rate)))


def knee(steps: Sequence[StepFigures], key: str | None) -> float | None:
    """The first rate at which the limiting figure grew faster than the rate did."""
    if key is None:
        return None
    ordered = sorted((s for s in steps if key in s.limits and s.limits[key] > 0), key=lambda s: s.rate)
    for a, b in itertools.pairwise(ordered):
        slope = math.log(b.limits[key] / a.limits[key]) / math.log(b.rate / a.rate)
        if slope > 1:
            return b.rate
    return None


def replay(cfg: CapacitySearch, slo: Slo, levels: Sequence[tuple[float | None, VllmSummary]]) -> Capacity:
    """A finished search's answer from its stored levels (rate, summary), in the order measured: the same
    steps through a fresh search (the stored run keeps the figures, not the answer)."""
    search = Search(cfg)
    for rate, summary in levels:
        if rate is None:
            continue
        search.next_rate()
        search.observe(figures(rate, summary, slo))
    if search.next_rate() is not None:
        search.stopped = "the run ended before the search did"
    return search.result()


def of_run(v: BenchmarkView) -> Capacity | None:
    """A stored benchmark's capacity search (None: it was not one, or measured nothing)."""
    cfg = v.spec.get("capacity")
    levels = [(lv.request_rate, s) for lv, s in zip(v.levels, v.summaries, strict=True)]
    if not isinstance(cfg, dict) or not levels or not levels[0][1].get("slo"):
        return None
    return replay(CapacitySearch.model_validate(cfg), parse_slo(str(levels[0][1]["slo"])), levels)
