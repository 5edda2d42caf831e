"""What the serving watch keeps of the engine that serves: its run, live samples, and the view /status and
/metrics read (ServingNow)."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from daemon.core.hoststate import ParkedInfo
from daemon.core.profiles import LoadedProfile
from daemon.engines.engine_types import MetricsSnapshot
from daemon.serving.metrics import MetricsWindow

LIVE_SAMPLES = 120  # per-interval samples kept in memory for the page's live chart


@dataclass(frozen=True)
class Sample:
    at: float  # wall clock, seconds
    tokens_per_s: float | None
    acceptance_length: float | None
    running: float | None
    acceptance_rate: float | None = None  # accepted / proposed draft tokens over the interval


@dataclass(frozen=True)
class ServingNow:
    run_id: int
    profile: str
    served_s: float
    tokens_per_s: float | None
    acceptance_length: float | None
    running: float | None
    waiting: float | None
    kv_usage: float | None
    generation_tokens: float | None
    acceptance_rate: float | None = None


@dataclass
class Serving:
    run_id: int
    lp: LoadedProfile
    started: float = field(default_factory=time.monotonic)
    window: MetricsWindow | None = None
    task: asyncio.Task[None] | None = None
    last: MetricsSnapshot | None = None
    live: deque[Sample] = field(default_factory=lambda: deque(maxlen=LIVE_SAMPLES))
    hang_acted: bool = False
    managed: bool = True  # started by k25-ctl; an engine an operator started by hand gets no automatic action
    # Set once the host may call it active: at once for an engine k25-ctl started; for one started outside
    # k25-ctl, when it answers health (or its load_timeout_s passed), or when its serving run ends.
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def unit(self) -> str:
        return self.lp.profile.unit

    @property
    def loading(self) -> bool:
        """Started outside k25-ctl and not yet answering health: not active yet."""
        return not self.settled.is_set()


class AnswerRecorder(Protocol):
    """The known answer's side of the watch: an engine started outside k25-ctl that turns out healthy had a
    cold start too, and its answer is what a later wake of it must give."""

    async def record_adopted(self, run_id: int, lp: LoadedProfile) -> None: ...


class ParkedUnits(Protocol):
    """Parking's side of the watch: which units sleep on purpose, and news that one went down."""

    def of_unit(self, unit: str) -> ParkedInfo | None: ...
    async def lost(self, unit: str, how: str) -> ParkedInfo | None: ...
