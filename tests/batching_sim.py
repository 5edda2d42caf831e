"""An engine whose batching physics are known apart from k25-ctl, in simulated time: continuous batching
where every running request gets one token per decode step and a step takes `step_s` x (1 + `growth` x
(running - 1)); a request's first token comes at the end of the first step it runs in; at most
`max_running` run, the others wait in order. Requests arrive as a Poisson stream.

`steady_tpot` measures the engine's mean TPOT at a rate over a long stream (the steady state), and
`true_capacity` finds where it meets a bound: the figures a capacity search is judged against.
`run_step` drives one capacity step of the real code (steady.SteadyStep) over the simulated engine."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from daemon.measure.capacity import CapacitySearch, Search, figures
from daemon.measure.capacity_step import StepJudge, level_summary
from daemon.measure.client import open_arrivals
from daemon.measure.metrics import RequestRecord
from daemon.measure.slo import Slo
from daemon.measure.steady import SteadyStep, Window


@dataclass(frozen=True)
class Physics:
    step_s: float = 0.0135  # one running request's decode step
    growth: float = 0.25  # a step's extra time per extra running request
    tokens: int = 64  # per request
    max_running: int | None = 48  # as an engine's max_num_seqs: past it requests wait


@dataclass
class _Running:
    index: int
    sent: float
    produced: int = 0
    ttft: float | None = None


def simulate(
    physics: Physics, arrivals: Iterator[tuple[int, float]], on_end: Callable[[RequestRecord], bool]
) -> None:
    """Runs the engine over `arrivals` ((index, time), in time order) until `on_end` (called as each
    request ends) says to stop, or the arrivals run out and the engine drains."""
    waiting: list[tuple[float, int]] = []
    running: list[_Running] = []
    clock = 0.0
    upcoming = next(arrivals, None)
    while True:
        if not running and not waiting:
            if upcoming is None:
                return
            clock = max(clock, upcoming[1])
        while upcoming is not None and upcoming[1] <= clock:  # joins at this step's start
            heapq.heappush(waiting, (upcoming[1], upcoming[0]))
            upcoming = next(arrivals, None)
        while waiting and (physics.max_running is None or len(running) < physics.max_running):
            sent, index = heapq.heappop(waiting)
            running.append(_Running(index, sent))
        if not running:
            continue
        clock += physics.step_s * (1 + physics.growth * (len(running) - 1))
        still = []
        for r in running:
            r.produced += 1
            if r.ttft is None:
                r.ttft = clock - r.sent
            if r.produced < physics.tokens:
                still.append(r)
                continue
            rec = RequestRecord(index=r.index, sent=r.sent, output_tokens=r.produced, ttft=r.ttft)
            rec.e2el = clock - r.sent
            if on_end(rec):
                return
        running = still


def poisson(rate: float, seed: int) -> Iterator[tuple[int, float]]:
    """The benchmark client's own open stream (Poisson, its rate exact over each block of arrivals)."""
    return enumerate(open_arrivals(rate, seed))


def steady_tpot(physics: Physics, rate: float, *, requests: int = 20_000, seed: int = 7) -> float:
    """The mean TPOT (seconds) of a long stream at `rate`, its first and last tenth left out."""
    tpots: dict[int, float] = {}

    def end(rec: RequestRecord) -> bool:
        if requests // 10 <= rec.index < requests - requests // 10 and rec.tpot is not None:
            tpots[rec.index] = rec.tpot
        return False

    simulate(physics, _until(poisson(rate, seed), requests), end)
    return sum(tpots.values()) / len(tpots)


def _until(arrivals: Iterator[tuple[int, float]], n: int) -> Iterator[tuple[int, float]]:
    for i, t in arrivals:
        if i >= n:
            return
        yield i, t


def true_capacity(physics: Physics, tpot_ms: float) -> float:
    """The rate whose steady mean TPOT is `tpot_ms`, by bisection over long simulated streams."""
    lo, hi = 0.5, 10.0
    while hi / lo > 1.002:
        mid = math.sqrt(lo * hi)
        if steady_tpot(physics, mid) * 1000.0 <= tpot_ms:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def run_step(physics: Physics, step: SteadyStep, rate: float, seed: int) -> SteadyStep:
    """One capacity step of the real code over the simulated engine: arrivals go on until it is done."""
    simulate(physics, poisson(rate, seed), step.end)
    return step


def search(physics: Physics, cfg: CapacitySearch, slo: Slo, *, requests: int, seed: int) -> Search:
    """A whole capacity search of the real code (its steps, windows, decisions) over the simulated engine."""
    found = Search(cfg)
    while (rate := found.next_rate()) is not None:
        step_seed = seed * 1000 + len(found.steps)
        window = Window(rate, requests, math.ceil(requests * cfg.extend))
        step = run_step(physics, SteadyStep(window, StepJudge(slo, rate, step_seed)), rate, step_seed)
        found.observe(figures(rate, level_summary(step, slo, rate, step_seed), slo))
    return found
