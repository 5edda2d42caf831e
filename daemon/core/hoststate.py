"""The host's state (idle | switching | active | unhealthy | failed | degraded | needs_reset), its current
run, phase and progress, the job in progress, published to subscribers (the API's SSE, sd_notify STATUS).
Each kind of change has its own method, so every field is set with its type and its neighbours."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from daemon.core.run_types import Phase, Progress, RunEventJson

log = logging.getLogger("k25.host")


def _with_progress(st: HostStatus, p: Progress | None) -> HostStatus:
    return replace(
        st,
        progress_percent=p.percent if p else None,
        progress_done=p.done if p else None,
        progress_total=p.total if p else None,
    )


class HostState(enum.StrEnum):
    IDLE = "idle"
    SWITCHING = "switching"
    ACTIVE = "active"
    UNHEALTHY = "unhealthy"  # the unit runs but the engine fails its liveness checks (hang, health)
    FAILED = "failed"  # the serving engine exited on its own (crash); nothing serves
    DEGRADED = "degraded"
    NEEDS_RESET = "needs_reset"


@dataclass(frozen=True)
class ParkedInfo:
    """A parked engine as /status shows it: asleep since when, how deep, what it still holds."""

    profile: str
    unit: str
    since: float  # epoch seconds
    level: int
    main_pid: int
    gpu_mib: dict[int, int]  # GPU index -> MiB it still holds there
    host_ram_bytes: int  # the weights it keeps in host RAM (0 where the engine drops them)
    run_id: int  # the run that parked it


@dataclass(frozen=True)
class HeldRam:
    """The host RAM an engine's process tree holds (resident: a parked engine's backup, or the block a woken
    vLLM kept), as the sampler last read it."""

    profile: str
    main_pid: int
    bytes: int
    parked: bool


@dataclass(frozen=True)
class ParkBudget:
    """The host RAM parked engines may pin (park_ram_budget_bytes) and what they pin now."""

    budget_bytes: int = 0
    used_bytes: int = 0


@dataclass(frozen=True)
class GpuHealthLine:
    """A GPU's health as /status shows it (daemon/health/): healthy | degraded | needs_reset, and why."""

    index: int
    state: str
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostStatus:
    state: HostState = HostState.IDLE
    active_profile: str | None = None
    target_profile: str | None = None
    run_id: int | None = None
    phase: str | None = None
    phase_detail: str | None = None  # what the phase is at (a drain: "3 running, 1 waiting")
    progress_percent: int | None = None
    progress_done: int | None = None
    progress_total: int | None = None
    reason: str | None = None
    since: float = field(default_factory=time.time)
    serving_run_id: int | None = None  # the serving run while a profile is active
    conflicts: tuple[str, ...] = ()  # managed units running beside the active one (started behind our back)
    warnings: tuple[str, ...] = ()  # what the operator must know whatever the state (a database moved aside)
    job_run_id: int | None = None  # a benchmark or experiment in progress
    job: str | None = None  # what the jobs in progress are doing, one line
    parked: tuple[ParkedInfo, ...] = ()  # engines asleep for a fast switch back
    park_budget: ParkBudget = ParkBudget()
    ram_held: tuple[HeldRam, ...] = ()  # the RAM ledger: each engine's process tree, serving or parked
    gpu_health: tuple[GpuHealthLine, ...] = ()  # each GPU's health (the GPU health watch)

    @property
    def job_line(self) -> JobLine:
        return JobLine(self.job_run_id, self.job)

    def to_dict(self) -> dict[str, Any]:  # JSON boundary: the body of an /events message
        return asdict(self)


@dataclass(frozen=True)
class JobLine:
    """The job that holds the host (a benchmark or experiment) and the jobs' one-line progress."""

    run_id: int | None
    text: str | None


class StateHub:
    """Holds the current status; every change goes to each subscriber's queue (the newest wins if a slow
    subscriber falls behind)."""

    def __init__(self) -> None:
        self.status = HostStatus()
        self._subscribers: set[asyncio.Queue[HostStatus]] = set()
        self._run_subscribers: dict[int, set[asyncio.Queue[RunEventJson]]] = {}

    def begin_switch(self, run_id: int, target: str) -> HostStatus:
        """The host is switching to `target` under this run (a switch or a rollback)."""
        st = replace(
            self.status,
            state=HostState.SWITCHING,
            target_profile=target,
            run_id=run_id,
            phase=Phase.CREATED,
            reason=None,
        )
        return self._set(_with_progress(st, None))

    def phase(self, phase: Phase, progress: Progress | None, detail: str | None = None) -> HostStatus:
        return self._set(_with_progress(replace(self.status, phase=phase, phase_detail=detail), progress))

    def settle(self, state: HostState, active_profile: str | None, reason: str | None) -> HostStatus:
        """No run in progress any more: no target, no phase, no progress."""
        st = replace(
            self.status,
            state=state,
            active_profile=active_profile,
            target_profile=None,
            run_id=None,
            phase=None,
            phase_detail=None,
            reason=reason,
        )
        return self._set(_with_progress(st, None))

    def health(self, state: HostState, reason: str | None) -> HostStatus:
        """The serving engine's liveness changed (active <-> unhealthy)."""
        return self._set(replace(self.status, state=state, reason=reason))

    def add_reason(self, why: str) -> HostStatus:
        return self._set(replace(self.status, reason=f"{self.status.reason or ''}; {why}".lstrip("; ")))

    def serving(self, run_id: int | None) -> HostStatus:
        """A serving run began (conflicts are those of the new engine, none yet) or ended."""
        st = self.status
        return self._set(replace(st, serving_run_id=run_id, conflicts=() if run_id else st.conflicts))

    def conflicts(self, units: tuple[str, ...]) -> HostStatus:
        return self._set(replace(self.status, conflicts=units))

    def warnings(self, warnings: tuple[str, ...]) -> HostStatus:
        return self._set(replace(self.status, warnings=warnings))

    def parked(self, engines: tuple[ParkedInfo, ...], budget: ParkBudget) -> HostStatus:
        return self._set(replace(self.status, parked=engines, park_budget=budget))

    def ram_held(self, held: tuple[HeldRam, ...]) -> HostStatus:
        return self._set(replace(self.status, ram_held=held))

    def gpu_health(self, lines: tuple[GpuHealthLine, ...]) -> HostStatus:
        if lines == self.status.gpu_health:
            return self.status
        return self._set(replace(self.status, gpu_health=lines))

    def set_job(self, line: JobLine) -> HostStatus:
        return self._set(replace(self.status, job_run_id=line.run_id, job=line.text))

    def _set(self, new: HostStatus) -> HostStatus:
        before = self.status
        if new.state != before.state:
            new = replace(new, since=time.time())
        self.status = new
        if new.state != before.state:
            run = new.run_id or before.run_id
            log.log(
                logging.WARNING if new.state in (HostState.DEGRADED, HostState.NEEDS_RESET) else logging.INFO,
                "host state %s -> %s%s: %s",
                before.state,
                new.state,
                f" (run {run})" if run else "",
                describe(new),
            )
        for q in self._subscribers:
            if q.full():
                q.get_nowait()
            q.put_nowait(new)
        return new

    async def subscribe(self) -> AsyncIterator[HostStatus]:
        q: asyncio.Queue[HostStatus] = asyncio.Queue(maxsize=64)
        self._subscribers.add(q)
        try:
            yield self.status
            while True:
                yield await q.get()
        finally:
            self._subscribers.discard(q)

    def publish_run(self, run_id: int, event: RunEventJson) -> None:
        """A run's event, as persisted, to whoever follows that run."""
        for q in self._run_subscribers.get(run_id, ()):
            q.put_nowait(event)

    @contextlib.contextmanager
    def follow_run(self, run_id: int) -> Iterator[asyncio.Queue[RunEventJson]]:
        """Subscribe first, then read what is already stored: no event falls in between."""
        q: asyncio.Queue[RunEventJson] = asyncio.Queue()
        self._run_subscribers.setdefault(run_id, set()).add(q)
        try:
            yield q
        finally:
            subs = self._run_subscribers.get(run_id, set())
            subs.discard(q)
            if not subs:
                self._run_subscribers.pop(run_id, None)


def age_text(seconds: float) -> str:
    """How long ago, as status lines say it: 42s, 3m, 1.5h."""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def describe(st: HostStatus, now: float | None = None) -> str:
    """One line for `systemctl status k25-ctl` (sd_notify STATUS=)."""
    line = _state_line(st, time.time() if now is None else now)
    if st.job:
        line += f" | {st.job}"
    if st.parked:
        line += " | parked: " + ", ".join(p.profile for p in st.parked)
    return line + "".join(f" | WARNING: {w}" for w in st.warnings)


def _state_line(st: HostStatus, now: float) -> str:
    if st.state is HostState.ACTIVE:
        line = f"active: {st.active_profile} (ready {age_text(now - st.since)})"
        return line + (f"; CONFLICT: {', '.join(st.conflicts)} also running" if st.conflicts else "")
    if st.state is HostState.SWITCHING:
        line = f"switching to {st.target_profile}: {st.phase or 'starting'}"
        if st.phase_detail:
            line += f" ({st.phase_detail})"
        if st.phase == "loading" and st.progress_percent is not None:
            line += f" {st.progress_percent}% ({st.progress_done}/{st.progress_total})"
        return line
    if st.state is HostState.IDLE:
        return "idle: no engine active"
    return f"{st.state}: {st.reason or 'see k25-ctl status'}"
