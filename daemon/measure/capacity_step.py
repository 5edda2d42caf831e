"""One capacity step judged (pure): its SLO figures with their intervals (steady.py), and whether it shows
an over-saturated engine; and what its level's summary keeps of that, so a stored search replays."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from daemon.core.jsontypes import VllmSummary
from daemon.measure import steady
from daemon.measure.metrics import RequestRecord, percentile, summarize
from daemon.measure.slo import Slo
from daemon.measure.slo import judge as judge_slo

QUEUE_GROWTH = 2.0  # late requests' TTFT over early ones' that says the queue is growing
KEEPING_UP = 0.9  # completions per second over arrivals per second below which the engine falls behind
MIN_QUEUE_S = 0.05  # a TTFT growth smaller than this (seconds) is noise, not a queue
GROWN_S = 1.0  # a TTFT growth this long (seconds) is a queue whatever the wait it grew from
# A queue fed faster than it drains makes each later arrival wait (rate / served - 1) seconds longer per
# second of sending; a wait that grew at least this share of that pace is that queue, however short the
# window (a 2.5 s window at 12 req/s into an engine serving 8 grows the wait by only 0.75 s).
DEFICIT_SHARE = 0.5


@dataclass(frozen=True)
class QueueTrend:
    """How the wait for a first token moved across a window: the late third of requests (by when they were
    sent) against the early third."""

    ratio: float | None  # late median TTFT over early median TTFT (None: too few answers, or no early wait)
    seconds: float  # late median TTFT minus early median TTFT
    per_s: float | None = None  # that difference per second between the thirds' median sending times


def queue_trend(records: Sequence[RequestRecord]) -> QueueTrend:
    """The TTFT trend of a window's answered requests."""
    done = sorted((r for r in records if r.ok and r.ttft is not None), key=lambda r: r.sent)
    third = len(done) // 3
    if third < 2:
        return QueueTrend(None, 0.0)
    early = percentile([r.ttft or 0.0 for r in done[:third]], 50)
    late = percentile([r.ttft or 0.0 for r in done[-third:]], 50)
    gap = percentile([r.sent for r in done[-third:]], 50) - percentile([r.sent for r in done[:third]], 50)
    seconds = late - early
    return QueueTrend(late / early if early > 0 else None, seconds, seconds / gap if gap > 0 else None)


def falling_behind(trend: QueueTrend, achieved: float, rate: float) -> bool:
    """A queue that grows while the engine completes requests slower than they arrive: the wait grew twice
    over, or by a second, or at least DEFICIT_SHARE of the pace the missing completions imply."""
    if trend.seconds < MIN_QUEUE_S or achieved >= KEEPING_UP * rate:
        return False
    if (trend.ratio is not None and trend.ratio >= QUEUE_GROWTH) or trend.seconds >= GROWN_S:
        return True
    deficit = rate / achieved - 1.0 if achieved > 0 else math.inf
    return trend.per_s is not None and trend.per_s >= DEFICIT_SHARE * deficit


def _error_share(records: Sequence[RequestRecord]) -> float:
    return sum(1 for r in records if not r.ok) / len(records) if records else 0.0


class StepJudge:
    """The decision of a step at `rate`: missed at once when its queue grows without bound, else by its
    figures' intervals against the SLO's bounds."""

    def __init__(self, slo: Slo, rate: float, seed: int) -> None:
        self.slo = slo
        self.rate = rate
        self.seed = seed

    def saturated(self, measured: list[RequestRecord], ended: list[RequestRecord]) -> bool:
        if not measured:
            return False
        span = range(min(r.index for r in measured), max(r.index for r in measured) + 1)
        return falling_behind(queue_trend(measured), steady.steady_throughput(ended, span), self.rate)

    def decide(self, measured: list[RequestRecord], ended: list[RequestRecord]) -> steady.Decision:
        slo = self.slo
        errors = slo.max_error_share is not None and _error_share(measured) > slo.max_error_share
        return steady.decide(steady.intervals(measured, slo, self.rate, self.seed), slo.bounds, errors)


def summary_of(step: steady.SteadyStep, slo: Slo, rate: float, seed: int) -> VllmSummary:
    """What a capacity step's level summary adds to the usual figures: the decision, the intervals, the
    warm-up and the steady throughput (the level's met and missed say the decision, not the point figures)."""
    measured, span = step.measured, step.window.span
    found = steady.intervals(measured, slo, rate, seed)
    decision = step.decision or steady.Decision.UNDECIDED
    trend = queue_trend(measured)
    ended = list(step.ended.values())
    served = 0.0 if span is None else steady.steady_throughput(ended, span)
    out: VllmSummary = {
        "slo_decision": decision.value,
        "slo_intervals": {i.key: [i.low, i.high] for i in found},
        "warmup_requests": step.window.warm,
        "steady_throughput": served,
        "over_saturated": falling_behind(trend, served, rate),
        "queue_growth": trend.ratio,
        "queue_growth_s": trend.seconds,
        "queue_growth_per_s": trend.per_s,
        "slo_met": decision is steady.Decision.MET,
    }
    if decision is steady.Decision.UNDECIDED:
        out["slo_missed"] = [f"undecided: {i.text()}" for i in found if i.low <= i.bound < i.high]
    return out


def level_summary(step: steady.SteadyStep, slo: Slo, rate: float, seed: int) -> VllmSummary:
    """A finished step's level summary: its measured requests' figures (over the time from the first one's
    sending to the last one's end), the SLO's judgement, and the step's own keys (summary_of)."""
    measured = step.measured
    start = min((r.sent for r in measured), default=0.0)
    end = max((r.sent + (r.e2el or 0.0) for r in measured), default=0.0)
    summary = summarize(measured, max(0.0, end - start))
    summary |= judge_slo(measured, summary, slo)
    return summary | summary_of(step, slo, rate, seed)
