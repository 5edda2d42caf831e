"""One capacity step judged (pure): its SLO figures with their intervals (steady.py), and whether it shows
an over-saturated engine; and what its level's summary keeps of that, so a stored search replays."""

from __future__ import annotations

from collections.abc import Sequence

from daemon.core.jsontypes import VllmSummary
from daemon.measure import steady
from daemon.measure.metrics import RequestRecord, percentile, summarize
from daemon.measure.slo import Slo
from daemon.measure.slo import judge as judge_slo

QUEUE_GROWTH = 2.0  # late requests' TTFT over early ones' that says the queue is growing
KEEPING_UP = 0.9  # completions per second over arrivals per second below which the engine falls behind
MIN_QUEUE_S = 0.05  # a TTFT growth smaller than this (seconds) is noise, not a queue
GROWN_S = 1.0  # a TTFT growth this long (seconds) is a queue whatever the wait it grew from


def queue_trend(records: Sequence[RequestRecord]) -> tuple[float | None, float]:
    """The median TTFT of the last third of requests (by when they were sent) over the first third's, and
    the difference in seconds; (None, 0) with too few answers."""
    done = sorted((r for r in records if r.ok and r.ttft is not None), key=lambda r: r.sent)
    third = len(done) // 3
    if third < 2:
        return None, 0.0
    early = percentile([r.ttft or 0.0 for r in done[:third]], 50)
    late = percentile([r.ttft or 0.0 for r in done[-third:]], 50)
    return (late / early if early > 0 else None), late - early


def falling_behind(growth: float | None, growth_s: float, achieved: float, rate: float) -> bool:
    """A queue that grows while the engine completes requests slower than they arrive. In a steady window
    the late requests' wait may be long already at its start, so a grown wait counts in seconds too: a
    deficit of completions that long is a queue, not noise."""
    if growth_s < MIN_QUEUE_S or achieved >= KEEPING_UP * rate:
        return False
    return (growth is not None and growth >= QUEUE_GROWTH) or growth_s >= GROWN_S


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
        growth, growth_s = queue_trend(measured)
        return falling_behind(growth, growth_s, steady.steady_throughput(ended, span), self.rate)

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
    growth, growth_s = queue_trend(measured)
    ended = list(step.ended.values())
    served = 0.0 if span is None else steady.steady_throughput(ended, span)
    out: VllmSummary = {
        "slo_decision": decision.value,
        "slo_intervals": {i.key: [i.low, i.high] for i in found},
        "warmup_requests": step.window.warm,
        "steady_throughput": served,
        "over_saturated": falling_behind(growth, growth_s, served, rate),
        "queue_growth": growth,
        "queue_growth_s": growth_s,
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
