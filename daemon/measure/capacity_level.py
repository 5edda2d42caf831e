"""One capacity step measured against the engine: an open stream of Poisson arrivals at the step's rate,
its warm-up left out and its measured requests sized for the SLO decision (steady.py), the engine's
counters around it, its level summary kept like any other level's."""

from __future__ import annotations

import math

from daemon.measure import capacity_step, steady
from daemon.measure.capacity import CapacitySearch
from daemon.measure.client import Request, run_stream
from daemon.measure.levels import Level, Measurement
from daemon.measure.slo import Slo

MOST_SENT = 4  # a step sends at most this many times the most requests it may measure (its warm-up too)


def most_sent(num_prompts: int, cfg: CapacitySearch) -> int:
    """The most requests a step sends, and so may have in flight: an open stream's client needs as many
    connections, or a queue would form in the client, where the engine's own could not be seen."""
    return MOST_SENT * math.ceil(num_prompts * cfg.extend)


async def measure(
    bench: Measurement, level: Level, slo: Slo, cfg: CapacitySearch, seed: int
) -> steady.Decision:
    """The step at `level.rate`; its level is kept in `bench.out.levels`, and its decision returned."""
    rate = level.rate
    if rate is None:
        raise ValueError("a capacity step has a request rate")
    size = len(bench.bodies)
    window = steady.Window(rate, size, math.ceil(size * cfg.extend))
    step = steady.SteadyStep(window, capacity_step.StepJudge(slo, rate, seed))
    await bench.warm_up(level)
    before = await bench.counters()
    progress = await bench.progress(level, size)
    base = bench.target.lp.profile.base_url

    def request(i: int) -> Request:
        path, body = bench.body(i)
        return Request(base + path, body)

    result = await run_stream(
        bench.client,
        request,
        rate=rate,
        concurrency=level.concurrency,
        timeout_s=bench.spec.request_timeout_s,
        seed=seed,
        most=most_sent(size, cfg),
        until=step.end,
        on_done=progress.finished,
    )
    await progress.written()
    after = await bench.counters()
    measured = step.measured
    await bench.event(
        f"{level.label}: {len(measured)} request(s) measured after a warm-up of {window.warm}, "
        f"{len(result.records)} ended: {(step.decision or steady.Decision.UNDECIDED).value}"
    )
    summary = capacity_step.level_summary(step, slo, rate, seed)
    unmeasured = sum(r.output_tokens for r in result.records if r.index not in (window.span or ()))
    in_flight = (result.sent - len(result.records)) * bench.spec.max_tokens  # cut off when it ended
    await bench.complete(level, summary, measured, (before, after), unmeasured + in_flight)
    return step.decision or steady.Decision.UNDECIDED
