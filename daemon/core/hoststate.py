"""The host's state (idle | switching | active | degraded | needs_reset), its current run, phase and load
progress, published to subscribers (the API's SSE, sd_notify STATUS)."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

log = logging.getLogger("k25.host")


class HostState(enum.StrEnum):
    IDLE = "idle"
    SWITCHING = "switching"
    ACTIVE = "active"
    UNHEALTHY = "unhealthy"  # the unit runs but the engine fails its liveness checks (hang, health)
    FAILED = "failed"  # the serving engine exited on its own (crash); nothing serves
    DEGRADED = "degraded"
    NEEDS_RESET = "needs_reset"


@dataclass(frozen=True)
class HostStatus:
    state: HostState = HostState.IDLE
    active_profile: str | None = None
    target_profile: str | None = None
    run_id: int | None = None
    phase: str | None = None
    progress_percent: int | None = None
    progress_done: int | None = None
    progress_total: int | None = None
    reason: str | None = None
    since: float = field(default_factory=time.time)
    serving_run_id: int | None = None  # the serving run while a profile is active
    conflicts: tuple[str, ...] = ()  # managed units running beside the active one (started behind our back)
    warnings: tuple[str, ...] = ()  # what the operator must know whatever the state (a database moved aside)
    job_run_id: int | None = None  # a benchmark or experiment in progress
    job: str | None = None  # what it is doing, one line

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class StateHub:
    """Holds the current status; every change goes to each subscriber's queue (the newest wins if a slow
    subscriber falls behind)."""

    def __init__(self) -> None:
        self.status = HostStatus()
        self._subscribers: set[asyncio.Queue[HostStatus]] = set()
        self._run_subscribers: dict[int, set[asyncio.Queue[dict[str, Any]]]] = {}

    def update(self, **changes: Any) -> HostStatus:
        before = self.status
        if "state" in changes and changes["state"] != before.state:
            changes.setdefault("since", time.time())
        self.status = replace(before, **changes)
        if self.status.state != before.state:
            st = self.status
            run = st.run_id or before.run_id
            log.log(
                logging.WARNING if st.state in (HostState.DEGRADED, HostState.NEEDS_RESET) else logging.INFO,
                "host state %s -> %s%s: %s",
                before.state, st.state, f" (run {run})" if run else "", describe(st),
            )  # fmt: skip
        for q in self._subscribers:
            if q.full():
                q.get_nowait()
            q.put_nowait(self.status)
        return self.status

    async def subscribe(self) -> AsyncIterator[HostStatus]:
        q: asyncio.Queue[HostStatus] = asyncio.Queue(maxsize=64)
        self._subscribers.add(q)
        try:
            yield self.status
            while True:
                yield await q.get()
        finally:
            self._subscribers.discard(q)

    def publish_run(self, run_id: int, event: dict[str, Any]) -> None:
        """A run's event, as persisted, to whoever follows that run."""
        for q in self._run_subscribers.get(run_id, ()):
            q.put_nowait(event)

    @contextlib.contextmanager
    def follow_run(self, run_id: int) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """Subscribe first, then read what is already stored: no event falls in between."""
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._run_subscribers.setdefault(run_id, set()).add(q)
        try:
            yield q
        finally:
            subs = self._run_subscribers.get(run_id, set())
            subs.discard(q)
            if not subs:
                self._run_subscribers.pop(run_id, None)


def _age(seconds: float) -> str:
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
    return line + "".join(f" | WARNING: {w}" for w in st.warnings)


def _state_line(st: HostStatus, now: float) -> str:
    if st.state is HostState.ACTIVE:
        line = f"active: {st.active_profile} (ready {_age(now - st.since)})"
        return line + (f"; CONFLICT: {', '.join(st.conflicts)} also running" if st.conflicts else "")
    if st.state is HostState.SWITCHING:
        line = f"switching to {st.target_profile}: {st.phase or 'starting'}"
        if st.phase == "loading" and st.progress_percent is not None:
            line += f" {st.progress_percent}% ({st.progress_done}/{st.progress_total})"
        return line
    if st.state is HostState.IDLE:
        return "idle: no engine active"
    return f"{st.state}: {st.reason or 'see k25-ctl status'}"
