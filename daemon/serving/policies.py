"""What the serving watch does about a crashed or hung engine: the profile's policy (`restart` with backoff
and a cap per hour, `rollback` to the last known-good profile, or `none`), each action a run linked to the
serving run it follows."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Protocol

from daemon.core.errors import Busy, K25Error
from daemon.core.hoststate import HostState, StateHub
from daemon.core.profiles import LoadedProfile
from daemon.core.run_types import RunKind
from daemon.core.settings import Settings

log = logging.getLogger("k25.watch")


class Switching(Protocol):
    """What the watch asks of the switcher: is a switch running, start one, and where to roll back to."""

    @property
    def busy(self) -> bool: ...
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


class Policies:
    def __init__(self, settings: Settings, hub: StateHub) -> None:
        self.settings, self.hub = settings, hub
        self.switcher: Switching | None = None
        self.restarts: dict[str, deque[float]] = {}

    async def act(self, policy: str, lp: LoadedProfile, parent: int | None, why: str) -> None:
        name = lp.profile.name
        switcher = self.switcher
        if policy == "none" or switcher is None:
            log.warning("%s of %s is 'none': no automatic action (run %s)", why, name, parent)
            return
        try:
            if policy == "restart":
                now = time.monotonic()
                recent = self.restarts.setdefault(name, deque())
                while recent and now - recent[0] > 3600:
                    recent.popleft()
                limit = self.settings.restart_limit_per_hour
                if len(recent) >= limit:
                    reason = f"{name}: restart limit reached ({limit} in the last hour); not restarting"
                    log.error("run %s: %s", parent, reason)
                    self.hub.update(reason=f"{self.hub.status.reason or ''}; {reason}".lstrip("; "))
                    return
                backoff = self.settings.restart_backoff_s * 2 ** len(recent)
                recent.append(now)
                log.warning("run %s: %s %s: restarting it in %.0fs (restart %d of %d this hour)",
                            parent, why, name, backoff, len(recent), limit)  # fmt: skip
                await asyncio.sleep(backoff)  # the backoff itself: no event to wait for
                if self.hub.status.state not in (HostState.FAILED, HostState.UNHEALTHY):
                    log.info("run %s: %s of %s: the host is %s by now; no restart", parent, why, name,
                             self.hub.status.state)  # fmt: skip
                    return
                await switcher.activate(name, force=True, parent=parent)
            elif policy == "rollback":
                target = await switcher.rollback_target(name, None)
                if target is None:
                    log.error("run %s: %s %s: no known-good profile to roll back to", parent, why, name)
                    return
                log.warning("run %s: %s %s: rolling back to %s", parent, why, name, target.profile.name)
                await switcher.activate(
                    target.profile.name, force=True, kind=RunKind.ROLLBACK, parent=parent, from_profile=name
                )
        except Busy as e:
            log.warning("run %s: %s of %s not taken: %s", parent, why, name, e)
        except K25Error as e:
            log.error("run %s: %s of %s failed to start: %s", parent, why, name, e)
