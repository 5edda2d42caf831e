"""What k25-ctl does about a crashed or hung engine: the profile's policy (`restart` with backoff and a cap
per hour, `rollback` to the last known-good profile, or `none`), each action a run linked to the serving
run it follows. The serving watch reports incidents; this acts on them, so the watch needs no switcher."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from daemon.core.errors import Busy, K25Error
from daemon.core.hoststate import HostState, StateHub
from daemon.core.profiles import LoadedProfile, Policy
from daemon.core.run_types import RunKind
from daemon.core.settings import Settings

RESTARTS_IN = "restarts in"  # the /status reason while a crashed engine waits for its restart
log = logging.getLogger("k25.policies")


class Switching(Protocol):
    """What the policies ask of the switcher: start a switch, and where to roll back to."""

    async def activate(
        self,
        name: str,
        *,
        force: bool = False,
        kind: RunKind = RunKind.SWITCH,
        parent: int | None = None,
        from_profile: str | None = None,
    ) -> int | None: ...
    async def rollback_target(self, failed: str, previous: str | None) -> LoadedProfile | None: ...


@dataclass(frozen=True)
class Incident:
    """The engine crashed (`on_failure`) or hung (`on_hang`) while serving run `run_id`."""

    policy: Policy
    lp: LoadedProfile
    run_id: int | None
    why: str  # "on_failure" | "on_hang"


class Incidents:
    """The watch's reports, in order; the policies take them as they come."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Incident] = asyncio.Queue()

    def report(self, incident: Incident) -> None:
        self._queue.put_nowait(incident)

    async def next(self) -> Incident:
        return await self._queue.get()


class Policies:
    def __init__(self, settings: Settings, hub: StateHub, incidents: Incidents, switcher: Switching) -> None:
        self.settings = settings
        self.hub = hub
        self.incidents = incidents
        self.switcher = switcher
        self.restarts: dict[str, deque[float]] = {}
        self._task: asyncio.Task[None] | None = None
        self._acting: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._take())

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._acting) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def _take(self) -> None:
        while True:
            incident = await self.incidents.next()
            task = asyncio.create_task(self.act(incident))  # a restart's backoff must not hold the next
            self._acting.add(task)
            task.add_done_callback(self._acting.discard)

    async def act(self, incident: Incident) -> None:
        name, parent, why = incident.lp.profile.name, incident.run_id, incident.why
        if incident.policy is Policy.NONE:
            log.warning("%s of %s is 'none': no automatic action (run %s)", why, name, parent)
            return
        try:
            if incident.policy is Policy.RESTART:
                await self._restart(name, parent, why)
            else:
                await self._rollback(name, parent, why)
        except Busy as e:
            log.warning("run %s: %s of %s not taken: %s", parent, why, name, e)
        except K25Error as e:
            log.error("run %s: %s of %s failed to start: %s", parent, why, name, e)

    async def _restart(self, name: str, parent: int | None, why: str) -> None:
        now = time.monotonic()
        recent = self.restarts.setdefault(name, deque())
        while recent and now - recent[0] > 3600:
            recent.popleft()
        limit = self.settings.restart_limit_per_hour
        if len(recent) >= limit:
            reason = f"{name}: restart limit reached ({limit} in the last hour); not restarting"
            log.error("run %s: %s", parent, reason)
            self.hub.add_reason(reason)
            return
        backoff = self.settings.restart_backoff_s * 2 ** len(recent)
        recent.append(now)
        log.warning(
            "run %s: %s %s: restarting it in %.0fs (restart %d of %d this hour)",
            parent,
            why,
            name,
            backoff,
            len(recent),
            limit,
        )
        # /status says a restart is coming (a reader of a failed host otherwise cannot tell); the restart's
        # switch replaces the line
        self.hub.add_reason(f"{name} {RESTARTS_IN} {backoff:g}s (restart {len(recent)} of {limit} this hour)")
        await asyncio.sleep(backoff)  # the backoff itself: no event to wait for
        if self.hub.status.state not in (HostState.FAILED, HostState.UNHEALTHY):
            log.info(
                "run %s: %s of %s: the host is %s by now; no restart",
                parent,
                why,
                name,
                self.hub.status.state,
            )
            return
        await self.switcher.activate(name, force=True, parent=parent)

    def budget(self) -> dict[str, int]:
        """Restarts each profile that has restarted may still take this hour (0: a crash stays down)."""
        now, limit = time.monotonic(), self.settings.restart_limit_per_hour
        return {
            name: max(0, limit - sum(1 for t in recent if now - t <= 3600))
            for name, recent in self.restarts.items()
        }

    async def _rollback(self, name: str, parent: int | None, why: str) -> None:
        target = await self.switcher.rollback_target(name, None)
        if target is None:
            log.error("run %s: %s %s: no known-good profile to roll back to", parent, why, name)
            return
        log.warning("run %s: %s %s: rolling back to %s", parent, why, name, target.profile.name)
        await self.switcher.activate(
            target.profile.name, force=True, kind=RunKind.ROLLBACK, parent=parent, from_profile=name
        )
