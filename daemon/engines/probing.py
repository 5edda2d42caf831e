"""What an engine says about itself over HTTP, asked the same way by a bring-up, a wake and a drain:
ready (its health rule, then one small generation) and busy (requests running or waiting)."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from daemon.core.errors import K25Error
from daemon.core.profiles import Profile
from daemon.core.run_types import Phase
from daemon.engines import engine_for
from daemon.engines.base import Engine
from daemon.engines.client import EnginePort, ProbeFailed, ProbeProgress
from daemon.engines.engine_types import MetricsSnapshot, Readiness

log = logging.getLogger("k25.probe")
WARMING_RETRY_S = 0.25  # SGLang answers 503 while it warms up: ask again this often until probe_timeout_s


class PhaseEvents(Protocol):
    """Where a probe reports its steps (a run's events)."""

    async def phase(self, phase: Phase, detail: str) -> None: ...


async def probe_generation(
    profile: Profile, engine: Engine, prober: EnginePort, progress: ProbeProgress, events: PhaseEvents
) -> None:
    while True:
        progress.health = await prober.health(profile, engine)
        state = engine.readiness(progress.health)
        if state is Readiness.HEALTHY:
            break
        if state is Readiness.DEAD:
            raise ProbeFailed(
                f"the engine reports itself dead on {profile.base_url} (HTTP {progress.health})"
            )
        await asyncio.sleep(WARMING_RETRY_S)
    progress.health_passed = True
    await events.phase(Phase.PROBING, f"health passed (HTTP {progress.health}); probing a generation")
    chunks = await prober.generate(profile, engine, progress)
    await events.phase(Phase.PROBING, f"probe generation finished ({chunks} chunk(s))")


async def metrics(profile: Profile, prober: EnginePort) -> MetricsSnapshot:
    """The engine's gauges now; empty when it cannot say (an engine that cannot is not waited for)."""
    engine = engine_for(profile)
    try:
        return engine.snapshot(profile, await prober.scrape(profile, engine))
    except K25Error as e:
        log.warning("%s: metrics unreadable (%s): taken as nothing in flight", profile.name, e)
        return MetricsSnapshot()


def count(x: float | None) -> int:
    return round(x or 0)


def load(s: MetricsSnapshot) -> int:
    """Requests running or waiting in one reading."""
    return count(s.running) + count(s.waiting)


async def in_flight(profile: Profile, prober: EnginePort) -> int:
    """Requests the engine runs or queues right now (what a stop without a drain cuts)."""
    return load(await metrics(profile, prober))
