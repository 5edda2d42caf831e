"""Capacity under an SLO, pure: the highest request rate at which a profile meets its SLO, found the way
`vllm bench sweep`'s serve_sla does, with the guards a production host needs. Bracketing from the start
rate, each step `factor` times the last rate that held the SLO (down by the factor while none did), then
bisection (geometric) until the highest rate that held it and the lowest that did not are within
`resolution` of each other. No step is ever more than `factor` above the highest rate that held the SLO.

Each step is measured in its steady state and decided only when its figures' intervals clear the SLO's
bounds (steady.py). A step still undecided at the most requests it may take proves nothing, but its figure
still says which way to look: the search goes on from it (within its figure: up; above: down), and the
answer's bracket is only ever made of decided steps, so it holds the limit at the steps' confidence.

A step that shows the engine over-saturated counts as missed, whatever its SLO figures: errors that the
proven rate did not have, or a queue that grows without bound (while the engine completes requests slower
than they arrive, the step's late requests wait for their first token longer than its early ones, at the
pace the missing completions imply: capacity_step.falling_behind), the signal GuideLLM's sweep stops on
(guidellm#242). The search then bisects below that
rate, never above it, and says that saturation bounded it (stopping there answered 2 req/s for an engine
that serves 2.9).

The answer: capacity, the highest rate proven (met, its intervals within the bounds), and the bracket the
limit lies in (each end decided at the steps' confidence); an estimate inside it (where the limiting figure
crosses its bound, interpolated in log rate between the nearest steps on either side); the limiting metric
(the bound nearest its limit, or saturation); and the knee, the first rate at which the limiting figure grew
faster than the rate (log-log slope above 1): where latency starts paying for load."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from daemon.core.jsontypes import VllmSummary
from daemon.measure.capacity_step import QueueTrend, falling_behind
from daemon.measure.slo import Slo
from daemon.measure.slo import parse as parse_slo
from daemon.store.bench import BenchmarkView

NEAR = 1.3  # the estimate's fit: steps within this factor of the crossing's rate


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
    extend: float = Field(
        default=4.0,
        ge=1,
        le=64,
        description="a step whose figures' intervals still hold a bound after num_prompts measured requests "
        "is extended (doubling) up to this many times num_prompts, then called undecided",
    )


@dataclass(frozen=True)
class StepFigures:
    """One step of a search, as its stored level says."""

    rate: float
    met: bool
    missed: list[str]
    achieved: float  # completed requests per second (in the steady state where measured so)
    queue: QueueTrend  # how the wait for a first token moved across the step
    failed: int
    limits: dict[str, float]  # each bound's key -> the level's figure over the bound (1: at the limit)
    undecided: bool = False  # the figures' intervals still held a bound at the most requests allowed
    saturation: str | None = None  # why the step showed an over-saturated engine
    requests: int = 0  # measured

    @property
    def decided_missed(self) -> bool:
        return not self.met and not self.undecided


@dataclass
class Capacity:
    """What a search found."""

    capacity: float | None  # the highest rate that met the SLO (None: not even the lowest step)
    lowest_missed: float | None  # the lowest rate that missed it (None: none did)
    estimate: float | None  # inside the bracket, where the limiting figure meets its bound
    limiting: str | None  # the bound that gave out first, or saturation
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


def figures(rate: float, summary: VllmSummary, slo: Slo) -> StepFigures:
    limits = {}
    for b in slo.bounds:
        value = summary.get(b.key)
        if value is not None:
            limits[b.key] = float(value) / b.ms
    duration = float(summary.get("duration") or 0.0)
    growth, per_s = summary.get("queue_growth"), summary.get("queue_growth_per_s")
    steady = summary.get("steady_throughput")  # a steady-state step's; older ones: over the level
    achieved = int(summary.get("completed") or 0) / duration if duration > 0 else 0.0
    return StepFigures(
        rate=rate,
        met=bool(summary.get("slo_met")),
        missed=list(summary.get("slo_missed") or []),
        achieved=float(steady) if steady is not None else achieved,
        queue=QueueTrend(
            None if growth is None else float(growth),
            float(summary.get("queue_growth_s") or 0.0),
            None if per_s is None else float(per_s),
        ),
        failed=int(summary.get("failed") or 0),
        limits=limits,
        undecided=summary.get("slo_decision") == "undecided",
        requests=int(summary.get("completed") or 0),
    )


def saturated(step: StepFigures, proven: StepFigures | None) -> str | None:
    """Why this step shows an over-saturated engine; None: it does not."""
    if step.failed and (proven is None or not proven.failed):
        return f"{step.failed} request(s) failed at {step.rate:.3g} req/s"
    if falling_behind(step.queue, step.achieved, step.rate):
        return (
            f"over-saturated at {step.rate:.3g} req/s: {step.achieved:.3g} req/s completed while the queue "
            f"grew (late requests waited {step.queue.seconds:.2g} s longer for a first token)"
        )
    return None


class Search:
    """The state of one capacity search: which rate to measure next, and what the steps showed."""

    def __init__(self, cfg: CapacitySearch) -> None:
        self.cfg = cfg
        self.steps: list[StepFigures] = []
        self.stopped: str | None = None

    @property
    def proven(self) -> StepFigures | None:
        met = [s for s in self.steps if s.met]
        return max(met, key=lambda s: s.rate) if met else None

    @property
    def missed(self) -> StepFigures | None:
        out = [s for s in self.steps if s.decided_missed]
        return min(out, key=lambda s: s.rate) if out else None

    def _key(self) -> str | None:
        """The limiting bound: nearest its limit at the decided bracket's ends, else at the newest step."""
        return _limiting(self.proven, self.missed) or _limiting(None, self.steps[-1] if self.steps else None)

    def _leaning(self, key: str | None) -> tuple[StepFigures | None, StepFigures | None]:
        """The steps that bound the search: the highest rate that met the SLO or, undecided, read within
        it, and the lowest that missed it or, undecided, read above it. An undecided step cannot prove the
        answer's bracket, but its figure still says which way to look."""

        def within(s: StepFigures) -> bool:
            return s.met or (s.undecided and key is not None and s.limits.get(key, 0.0) <= 1.0)

        below = [s for s in self.steps if within(s)]
        above = [s for s in self.steps if not within(s)]
        return (
            max(below, key=lambda s: s.rate) if below else None,
            min(above, key=lambda s: s.rate) if above else None,
        )

    def next_rate(self) -> float | None:
        """The next step's rate; None: the search is over (`stopped` says why)."""
        if self.stopped is not None:
            return None
        rate = self._next()
        if rate is not None and any(math.isclose(rate, s.rate, rel_tol=1e-9) for s in self.steps):
            self.stopped = f"undecided at {rate:.3g} req/s twice"  # the steps cannot narrow it further
            return None
        return rate

    def _next(self) -> float | None:
        if self.stopped is not None:
            return None
        cfg = self.cfg
        lo, hi = self._leaning(self._key())
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
            undecided = sum(1 for s in self.steps if s.undecided)
            self.stopped = f"bracketed to {cfg.resolution:.0%}" + (
                f" ({undecided} step(s) undecided: the SLO's limit is within their measurements' reach)"
                if undecided
                else ""
            )
            return None
        return math.sqrt(lo.rate * hi.rate)  # below a saturated step too, never above it

    def observe(self, step: StepFigures) -> None:
        """One step measured; one that shows an over-saturated engine is missed, whatever its figures."""
        why = saturated(step, self.proven)
        if why is not None:
            step = replace(step, met=False, undecided=False, missed=[*step.missed, why], saturation=why)
        self.steps.append(step)

    def result(self) -> Capacity:
        lo, hi = self.proven, self.missed
        key = self._key()
        soft_lo, soft_hi = self._leaning(key)
        # Saturation bounded the answer where the step that bounds the search from above showed it.
        over = soft_hi.saturation if soft_hi is not None else None
        reason = self.stopped or "stopped before it was done"
        if over is not None:
            reason = f"{reason}; {over}"
        estimate = _estimate(self.steps, key)
        if over is not None and soft_lo is not None and soft_hi is not None:
            estimate = math.sqrt(soft_lo.rate * soft_hi.rate)  # between the last rate served and the queue
        limiting = "saturation" if over is not None else key
        return Capacity(
            capacity=lo.rate if lo else None,
            lowest_missed=hi.rate if hi else None,
            estimate=estimate,
            limiting=limiting,
            knee=knee(self.steps, limiting),
            reason=reason,
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


def _estimate(steps: Sequence[StepFigures], key: str | None) -> float | None:
    """Where the limiting figure reaches its bound: a line through log figure against log rate, fitted
    (weighted by each step's measured requests) to the steps within a factor of `NEAR` of the crossing
    the nearest steps on either side point at, and kept within the decided bracket. One step's figure near
    the limit varies by ~20% even at a few hundred requests: the fit pools its neighbours, and a narrow
    span keeps the curve's bend (latency grows ever faster with load) out of the line."""
    if key is None:
        return None
    seen = [s for s in steps if key in s.limits and s.limits[key] > 0 and s.saturation is None]
    below = [s.rate for s in seen if s.limits[key] <= 1]
    above = [s.rate for s in seen if s.limits[key] > 1]
    if not below or not above:
        return None
    mid = math.sqrt(max(below) * min(above))
    near = [s for s in seen if 1 / NEAR <= s.rate / mid <= NEAR]
    x = np.log([s.rate for s in near])
    y = np.log([s.limits[key] for s in near])
    at = mid
    if len(near) >= 2 and float(np.ptp(x)) > 0:
        slope, intercept = np.polyfit(x, y, 1, w=np.sqrt([max(1, s.requests) for s in near]))
        if slope > 0:
            at = math.exp(-intercept / slope)
    met = [s.rate for s in steps if s.met]
    missed = [s.rate for s in steps if s.decided_missed]
    low, high = max(met, default=0.0), min(missed, default=math.inf)
    return min(max(at, low), high) if low <= high else at


def knee(steps: Sequence[StepFigures], key: str | None) -> float | None:
    """The first rate at which the limiting figure grew faster than the rate did."""
    if key is None:
        return None
    ordered = sorted((s for s in steps if key in s.limits and s.limits[key] > 0), key=lambda s: s.rate)
    for a, b in itertools.pairwise(ordered):
        if b.rate <= a.rate:  # measured twice
            continue
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
