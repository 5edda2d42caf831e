"""Start one engine unit and prove it ready: follow its journal (load progress, errors, ready markers) and
its unit state (a crash ends the wait at once) from before the start; once HTTP is up, the engine's
health rule, then one small streamed completion within probe_timeout_s."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Protocol

from daemon.core.errors import K25Error
from daemon.core.profiles import Profile
from daemon.core.run_types import Phase
from daemon.engines.base import Engine, ignore_patterns
from daemon.engines.client import EnginePort, ProbeFailed, ProbeProgress
from daemon.engines.engine_types import LogEvent, LogKind
from daemon.engines.load_stages import LoadStages
from daemon.engines.probing import probe_generation
from daemon.host.journal import JournalPort, JournalRecord
from daemon.host.systemd import SystemdPort, UnitState

HEALTH_RETRY_S = 1.0  # health is asked again this often where no log line announces HTTP (custom engines)
ERRORS_KEPT = 20
# Health can pass before the journal has delivered the lines printed before it (stage durations, the
# "server started" line): after the probe, wait this long at most for that line, so no stage is lost.
JOURNAL_CATCHUP_S = 5.0


class BringUpFailed(K25Error):
    def __init__(self, reason: str, errors: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.errors = errors


@dataclass
class BringUp:
    """What was seen while bringing one unit up."""

    errors: list[str] = field(default_factory=list)
    load_seconds: float | None = None
    last_percent: int | None = None
    probe: ProbeProgress = field(default_factory=ProbeProgress)


class BringUpEvents(Protocol):
    """Where bring_up reports its steps (the switch records each one as an event of its run)."""

    async def phase(self, phase: Phase, detail: str, *, load_seconds: float | None = None) -> None: ...
    async def progress(self, ev: LogEvent) -> None: ...
    async def stage(self, stage: str, seconds: float) -> None: ...


async def bring_up(
    profile: Profile,
    engine: Engine,
    *,
    systemd: SystemdPort,
    journal: JournalPort,
    prober: EnginePort,
    events: BringUpEvents,
    start_timeout_s: float = 120.0,
    start: bool = True,
) -> BringUp:
    """`start=False`: the unit already runs (a daemon restart cut the switch short): follow it instead."""
    run = _Run(profile, engine, systemd, prober, events)
    # Both followers subscribe before the start: no line and no state change falls in between.
    async with journal.follow(profile.unit) as records, systemd.watch(profile.unit) as states:
        tasks = [asyncio.create_task(run.read_journal(records)), asyncio.create_task(run.ask_health())]
        unit_down = asyncio.create_task(run.watch_unit(states))
        try:
            await run.start(start, start_timeout_s)
            await run.until_ready(unit_down)
        finally:
            for t in (*tasks, unit_down):
                t.cancel()
            for t in (*tasks, unit_down):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
    return run.seen


class _Run:
    """One bring-up: its followers (journal, unit state, health) and its steps (start, load, probe)."""

    def __init__(
        self,
        profile: Profile,
        engine: Engine,
        systemd: SystemdPort,
        prober: EnginePort,
        events: BringUpEvents,
    ) -> None:
        self.profile = profile
        self.engine = engine
        self.systemd = systemd
        self.prober = prober
        self.events = events
        self.seen = BringUp()
        self.http_up = asyncio.Event()
        self.logged_up = asyncio.Event()  # the journal has reached the engine's "HTTP up" line
        self.start_done = asyncio.Event()  # down states before the start job ended are the previous run's
        self.began = time.monotonic()

    async def read_journal(self, records: AsyncIterator[JournalRecord]) -> None:
        ignore = ignore_patterns(self.profile)
        stages = LoadStages(self.engine)  # each completed stage goes to events.stage (the run keeps them)
        async for rec in records:
            if (stage := stages.feed(rec.message, rec.timestamp)) is not None:
                await self.events.stage(stage, stages.stages[stage])
            ev = self.engine.classify_line(rec.message, ignore)
            if ev is not None:
                await self._line(ev)

    async def _line(self, ev: LogEvent) -> None:
        if ev.kind is LogKind.PROGRESS:
            if ev.percent != self.seen.last_percent:
                self.seen.last_percent = ev.percent
                await self.events.progress(ev)
        elif ev.kind is LogKind.READY:
            self.http_up.set()
            self.logged_up.set()
        elif ev.kind is LogKind.ERROR:
            self.seen.errors = [*self.seen.errors[-(ERRORS_KEPT - 1) :], ev.line]

    async def watch_unit(self, states: AsyncIterator[UnitState]) -> UnitState:
        async for st in states:
            if self.start_done.is_set() and st.is_down:
                return st
        raise BringUpFailed("the unit's state stream ended", self.seen.errors)

    async def ask_health(self) -> None:
        while not self.http_up.is_set():
            if await self.prober.health(self.profile, self.engine) is not None:
                self.http_up.set()
                return
            await asyncio.sleep(HEALTH_RETRY_S)

    async def start(self, start: bool, within_s: float) -> None:
        unit = self.profile.unit
        if start:
            await self.events.phase(Phase.START, unit)
            outcome = await self.systemd.start(unit, within_s=within_s)
            if not outcome.ok:
                raise BringUpFailed(
                    f"systemd could not start {unit}: job {outcome.job_result}", self.seen.errors
                )
        self.start_done.set()
        now = await self.systemd.state(unit)
        if now.is_down:  # it died before the stream could tell: a crash right at exec
            why = f"{unit} exited right after its start ({now.result}, status {now.exec_main_status})"
            raise BringUpFailed(why, self.seen.errors)
        how = "started" if start else "followed after a daemon restart"
        await self.events.phase(Phase.LOADING, f"{unit} {how} (main PID {now.main_pid})")

    async def until_ready(self, unit_down: asyncio.Task[UnitState]) -> None:
        p, seen = self.profile, self.seen
        await _first(self.http_up.wait(), unit_down, p.load_timeout_s, Phase.LOADING, p, seen)
        seen.load_seconds = time.monotonic() - self.began
        await self.events.phase(
            Phase.PROBING, f"HTTP up after {seen.load_seconds:.1f}s", load_seconds=seen.load_seconds
        )
        probe = probe_generation(p, self.engine, self.prober, seen.probe, self.events)
        await _first(probe, unit_down, p.probe_timeout_s, Phase.PROBING, p, seen)
        if self.engine.ready_res:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.logged_up.wait(), JOURNAL_CATCHUP_S)


async def _first(
    work: Awaitable[object],
    unit_down: asyncio.Task[UnitState],
    within_s: float,
    phase: Phase,
    profile: Profile,
    seen: BringUp,
) -> None:
    """Wait for `work`, but fail at once if the unit goes down, and after `within_s` at the latest."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task, unit_down}, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if unit_down in done and task not in done:
        task.cancel()
        st = unit_down.result()
        raise BringUpFailed(
            f"{profile.unit} exited during {phase} ({st.active_state}, result {st.result}, "
            f"status {st.exec_main_status})",
            seen.errors,
        )
    if task not in done:
        task.cancel()
        if phase is Phase.LOADING:
            what = f"HTTP did not come up within load_timeout_s={within_s:.0f}s"
        else:
            what = f"not ready within probe_timeout_s={within_s:.0f}s: {seen.probe.what_hung()}"
        raise BringUpFailed(f"{profile.unit}: {what}", seen.errors)
    try:
        task.result()
    except ProbeFailed as e:
        raise BringUpFailed(f"{profile.unit}: {e}", seen.errors) from e
