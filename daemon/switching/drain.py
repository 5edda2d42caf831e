"""Drain before a stop. The host is already out of rotation when this starts (`/ready` answers 503 from
the moment a switch begins); the balancer gets `grace_s` to see that, then the serving engine's own gauges
(running and waiting requests, read as the serving watch reads them) are awaited until both are 0 or
`timeout_s` has passed. The engine has no event for "idle": its metrics are read every `poll_s`."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile, Profile
from daemon.core.run_types import Outcome, Phase
from daemon.engines.client import EnginePort
from daemon.engines.probing import count, in_flight, load, metrics
from daemon.runs.events import RunEvents
from daemon.runs.recorder import HostAfter, RunRecorder

log = logging.getLogger("k25.drain")


@dataclass(frozen=True)
class DrainResult:
    seconds: float
    finished: int  # requests the engine counted as finished during the drain
    cut: int  # requests still running or waiting when the drain ended (0 after a full drain)
    timed_out: bool

    def describe(self) -> str:
        end = f"timed out with {self.cut} request(s) left (they are cut)" if self.timed_out else "drained"
        return f"{end} after {self.seconds:.1f}s; {self.finished} request(s) finished meanwhile"


class DrainEvents(Protocol):
    async def phase(self, phase: Phase, detail: str) -> None: ...


class DrainPlan(Protocol):
    """What a switch drains: the serving profile (drained first), or the one whose cut is only counted,
    and when the host left the balancer's rotation."""

    @property
    def drain_from(self) -> LoadedProfile | None: ...
    @property
    def measure_cut(self) -> LoadedProfile | None: ...
    @property
    def out_at(self) -> datetime | None: ...


@dataclass(frozen=True)
class DrainTimes:
    grace_s: float
    timeout_s: float
    poll_s: float


async def drain(profile: Profile, prober: EnginePort, events: DrainEvents, times: DrainTimes) -> DrainResult:
    """Cancellable at any point (nothing has been stopped: the engine serves on)."""
    began = time.monotonic()
    await events.phase(Phase.DRAINING, f"out of rotation; {times.grace_s:g}s for the balancer to see it")
    await asyncio.sleep(times.grace_s)  # the balancer's check interval: a period, not a condition
    first = await metrics(profile, prober)
    last, shown = first, None
    deadline = began + times.grace_s + times.timeout_s
    while load(last) > 0 and time.monotonic() < deadline:
        if (now := (last.running, last.waiting)) != shown:
            shown = now
            await events.phase(
                Phase.DRAINING, f"draining: {count(last.running)} running, {count(last.waiting)} waiting"
            )
        await asyncio.sleep(times.poll_s)
        last = await metrics(profile, prober)
    finished = count(last.requests) - count(first.requests) if last.requests is not None else 0
    return DrainResult(time.monotonic() - began, max(0, finished), load(last), load(last) > 0)


async def drain_for_switch(
    run_id: int,
    recorder: RunRecorder,
    prober: EnginePort,
    times: DrainTimes,
    plan: DrainPlan,
) -> bool:
    """A switch's drain, recorded on its run: the serving engine's requests finish before it stops (or,
    not drained, what the stop cuts is counted). False when cancelled meanwhile: the run ends `cancelled`,
    the engine serves on and the host is back in rotation."""
    drain_from, measure_cut, out_at = plan.drain_from, plan.measure_cut, plan.out_at
    serving = drain_from or measure_cut
    if serving is None:
        return True  # nothing served: nothing to drain or count
    try:
        if drain_from is None:  # no drain: what is in flight now is cut by the stop
            cut = await in_flight(serving.profile, prober)
            await recorder.drained(run_id, seconds=None, finished=0, cut=cut, timed_out=False)
            return True
        result = await drain(drain_from.profile, prober, RunEvents(recorder, run_id), times)
        await recorder.event(run_id, Phase.DRAINING, result.describe())
        await recorder.drained(
            run_id,
            seconds=result.seconds,
            finished=result.finished,
            cut=result.cut,
            timed_out=result.timed_out,
        )
        return True
    except asyncio.CancelledError:
        # Anywhere up to here nothing was stopped. (Counting the cut reads a hung engine's metrics for
        # seconds: a cancel there, outside this handler, once left the run unended and the host switching:
        # the simulation's seed 2026, step 613.)
        if (task := asyncio.current_task()) is not None:
            task.uncancel()
        why = "cancelled before the stop: nothing was stopped; the engine serves on"
        back = HostAfter(HostState.ACTIVE, serving.profile.name)
        await recorder.finish(run_id, Outcome.CANCELLED, detail=why, host=back)
        if out_at is not None:  # back in rotation: what the balancer saw was the drain
            await recorder.back_in_rotation(run_id, out_at)
        return False
