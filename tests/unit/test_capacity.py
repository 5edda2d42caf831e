"""The capacity search (issue 53), against models whose capacity is known."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from daemon.measure.capacity import CapacitySearch, Search, StepFigures, replay
from daemon.measure.capacity_step import KEEPING_UP, QueueTrend, falling_behind, queue_trend
from daemon.measure.metrics import RequestRecord
from daemon.measure.slo import parse
from daemon.measure.spec import BenchmarkSpec

SLO = parse("tpot_p95_ms=50")


def step(rate: float, capacity: float, *, saturates: float | None = None) -> StepFigures:
    """A model engine: p95 TPOT reaches the 50 ms bound at `capacity`; past `saturates` the queue grows
    without bound (completions stay at that rate, late requests wait 4x as long) while TPOT stays fine."""
    ratio = (rate / capacity) ** 1.5
    if saturates is not None:
        ratio = min(ratio, 0.8)
    over = saturates is not None and rate > saturates
    return StepFigures(
        rate=rate,
        met=ratio <= 1,
        missed=[] if ratio <= 1 else [f"p95_tpot_ms {ratio * 50:.1f} > 50"],
        achieved=min(rate, saturates) if over and saturates else rate * 0.97,
        queue=QueueTrend(4.0, 0.4, 0.3) if over else QueueTrend(1.05, 0.001, 0.0),
        failed=0,
        limits={"p95_tpot_ms": ratio},
    )


def run(cfg: CapacitySearch, model: float, **kw: float) -> Search:
    search = Search(cfg)
    while (rate := search.next_rate()) is not None:
        search.observe(step(rate, model, **kw))
    return search


@pytest.mark.parametrize("known", [0.7, 3.3, 12.0, 57.0, 400.0])
@pytest.mark.parametrize("start", [1.0, 25.0])
def test_the_search_brackets_the_known_capacity_to_its_resolution(known: float, start: float) -> None:
    cfg = CapacitySearch(start_rate=start, resolution=0.1, max_steps=20)
    search = run(cfg, known)
    found = search.result()
    assert found.capacity is not None, found
    assert found.lowest_missed is not None, found
    assert found.capacity <= known < found.lowest_missed
    assert found.lowest_missed <= found.capacity * 1.1 + 1e-9
    assert found.reason == "bracketed to 10%"
    assert found.limiting == "p95_tpot_ms"
    assert found.estimate is not None
    assert abs(found.estimate / known - 1) < 0.02
    assert "capacity" in found.text()
    assert "limited by p95_tpot_ms" in found.text()


def test_no_step_goes_further_above_the_proven_rate_than_the_factor() -> None:
    cfg = CapacitySearch(start_rate=0.5, factor=3.0, resolution=0.05, max_steps=30)
    search = run(cfg, 41.0)
    proven = 0.0
    for s in search.steps:
        assert proven == 0.0 or s.rate <= proven * 3.0 + 1e-9, [x.rate for x in search.steps]
        if s.met:
            proven = max(proven, s.rate)


def test_after_an_over_saturated_step_the_search_bisects_below_it() -> None:
    """The queue grows past 9 req/s while TPOT stays within the SLO: the search goes on below the first
    step that shows it (never above it) until the bracket reaches the resolution, and says saturation
    bounded it (it used to stop at [8, 16])."""
    cfg = CapacitySearch(start_rate=1.0, factor=2.0, resolution=0.05, max_steps=20)
    search = run(cfg, 1000.0, saturates=9.0)
    found = search.result()
    rates = [s.rate for s in search.steps]
    assert rates[:5] == [1.0, 2.0, 4.0, 8.0, 16.0], rates
    first_over = 16.0
    assert all(r <= first_over for r in rates), rates
    assert found.capacity is not None
    assert found.lowest_missed is not None
    # The queue is told from noise only once completions fall 10% behind arrivals (KEEPING_UP).
    assert 9.0 <= found.capacity <= 9.0 / KEEPING_UP < found.lowest_missed, found
    assert found.lowest_missed <= found.capacity * 1.05 + 1e-9, found
    assert found.reason.startswith("bracketed to 5%"), found.reason
    assert "over-saturated at" in found.reason
    assert "queue grew" in found.reason
    assert search.next_rate() is None
    assert found.limiting == "saturation"
    assert "limited by saturation" in found.text()


def test_errors_that_the_proven_rate_did_not_have_bound_the_search_from_above() -> None:
    search = Search(CapacitySearch(start_rate=2.0, resolution=0.5))
    search.observe(step(2.0, 100.0))
    broken = step(4.0, 100.0)
    search.observe(StepFigures(**(broken.__dict__ | {"failed": 3})))
    assert search.next_rate() == pytest.approx(math.sqrt(8.0))  # below the failing rate, never above
    search.observe(step(math.sqrt(8.0), 100.0))
    assert search.next_rate() is None
    found = search.result()
    assert found.reason == "bracketed to 50%; 3 request(s) failed at 4 req/s"
    assert found.capacity == pytest.approx(math.sqrt(8.0))
    assert found.limiting == "saturation"


def test_a_slo_missed_at_the_start_steps_down() -> None:
    search = run(CapacitySearch(start_rate=100.0, factor=2.0, resolution=0.2), 7.0)
    rates = [s.rate for s in search.steps]
    assert rates[:5] == [100.0, 50.0, 25.0, 12.5, 6.25], rates
    assert search.result().capacity is not None


def test_the_step_limit_and_the_highest_rate_allowed_end_a_search() -> None:
    limited = run(CapacitySearch(start_rate=1.0, max_steps=3), 1000.0).result()
    assert limited.reason == "the step limit (3) was reached"
    assert limited.lowest_missed is None
    capped = run(CapacitySearch(start_rate=1.0, max_rate=5.0), 1000.0)
    assert [s.rate for s in capped.steps] == [1.0, 2.0, 4.0, 5.0]
    assert capped.result().reason == "the SLO held up to the highest rate allowed (5 req/s)"


def test_the_knee_is_where_latency_grows_faster_than_load() -> None:
    search = run(CapacitySearch(start_rate=1.0, resolution=0.1), 20.0)
    knee = search.result().knee
    assert knee is not None
    assert knee == min(s.rate for s in search.steps if s.rate > 1.0)


def test_a_stored_search_replays_to_the_same_answer() -> None:
    cfg = CapacitySearch(start_rate=1.0, resolution=0.1)
    live = run(cfg, 13.0)
    levels = [
        (
            s.rate,
            {
                "slo": SLO.text(),
                "slo_met": s.met,
                "slo_missed": s.missed,
                "p95_tpot_ms": s.limits["p95_tpot_ms"] * 50,
                "completed": 10,
                "duration": 10 / s.achieved,
                "failed": 0,
                "queue_growth": s.queue.ratio,
                "queue_growth_s": s.queue.seconds,
                "queue_growth_per_s": s.queue.per_s,
            },
        )
        for s in live.steps
    ]
    again = replay(cfg, SLO, levels)
    assert again.capacity == live.result().capacity
    assert again.reason == live.result().reason
    half = replay(cfg, SLO, levels[:3])
    assert half.reason == "the run ended before the search did"
    assert math.isclose(half.capacity or 0.0, 4.0)


def test_a_capacity_spec_needs_an_slo_and_chooses_its_own_rates() -> None:
    with pytest.raises(ValidationError, match="needs an SLO"):
        BenchmarkSpec.model_validate({"capacity": {}})
    with pytest.raises(ValidationError, match="chooses its own request rates"):
        BenchmarkSpec.model_validate({"capacity": {}, "slo": "tpot_p95_ms=50", "request_rate": [1.0]})
    spec = BenchmarkSpec.model_validate({"capacity": {"start_rate": 3.0}, "slo": "tpot_p95_ms=50"})
    assert spec.levels() == [(None, 3.0)]


def _arrivals(rate: float, served: float, n: int, wait0: float) -> list[RequestRecord]:
    """n requests sent at `rate` into a queue drained at `served` (wait0 s before the first token when
    idle): each waits for those ahead of it that the engine has not yet completed."""
    out = []
    for i in range(n):
        sent = i / rate
        backlog = max(0.0, i - served * sent)
        out.append(RequestRecord(index=i, sent=sent, ttft=wait0 + backlog / served, e2el=1.0))
    return out


def test_a_short_window_into_a_falling_behind_engine_shows_its_queue() -> None:
    """30 requests at 12 req/s into an engine serving 8.3 (the window a loaded CI machine measured): the
    wait grew 0.75 s, under a second and not twice over, yet at the pace the missing completions imply."""
    records = _arrivals(12.0, 8.3, 30, wait0=1.5)
    trend = queue_trend(records)
    assert trend.ratio is not None
    assert trend.ratio < 2.0
    assert trend.seconds < 1.0
    assert falling_behind(trend, 8.3, 12.0)
    # Keeping up (a flat wait), or completing 9 in 10 of the arrivals: no queue.
    assert not falling_behind(queue_trend(_arrivals(8.0, 8.3, 30, wait0=1.5)), 8.0, 8.0)
    assert not falling_behind(trend, 11.0, 12.0)
    # A wait that drifts up by noise while completions lag: far under the pace a queue would grow at.
    assert not falling_behind(QueueTrend(1.1, 0.1, 0.05), 8.3, 12.0)
