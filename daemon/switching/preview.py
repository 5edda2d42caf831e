"""What `POST /profiles/{name}/activate` would do now, said without doing it (`POST /plans` with
`activate`: Ansible's check mode, `k25-ctl activate --dry-run`): whether it switches at all, how the
serving engine goes away (drained, parked or stopped) and how the new one comes (woken or cold), what would
refuse it, and about how long it took last time. Nothing is started, stopped or recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile
from daemon.core.run_types import Outcome, RunKind
from daemon.parking.service import Parking
from daemon.runs.jobs import Jobs
from daemon.switching.transaction import Switcher

Typical = Callable[..., float | None]  # BenchStore.typical_seconds(profile=, kind=, outcome=)


@dataclass(frozen=True)
class SwitchPreview:
    profile: str
    from_profile: str | None  # the profile that serves now (None: nothing does)
    state: str  # the host's state now
    switch: bool  # False: already active and healthy (the activate is a 200 no-op) or refused
    reason: str  # why it would or would not switch, in words
    refused: str | None = None  # what the activate would be refused for now (busy, needs a reset)
    away: str | None = None  # how the serving engine goes: "drain, then park" | "drain, then stop" | "stop"
    start: str | None = None  # "wake" (it is parked) | "cold start"
    estimate_s: float | None = None  # the profile's last successful switch, start to active


class SwitchPreviewer:
    def __init__(self, *, switcher: Switcher, jobs: Jobs, parking: Parking, typical: Typical) -> None:
        self.switcher = switcher
        self.jobs = jobs
        self.parking = parking
        self.typical = typical

    async def preview(self, name: str, *, force: bool = False, drain: bool = True) -> SwitchPreview:
        """NotFound for a profile that is unknown or invalid, as the activate would answer."""
        profiles = await self.switcher.read_profiles()
        lp = profiles.require(name)
        st = self.switcher.hub.status
        serving = st.active_profile if st.state in (HostState.ACTIVE, HostState.UNHEALTHY) else None
        refused = self.jobs.busy_reason()
        if st.state is HostState.NEEDS_RESET:
            refused = f"the host needs a GPU reset or reboot: {st.reason}"
        if (unhealthy := self.switcher.host.gpus.blocked(lp.profile.gpus)) and not force:
            refused = unhealthy
        if not force and await self.switcher.serves(lp):
            return SwitchPreview(
                name, serving, st.state.value, False, f"{name} is already active and healthy"
            )
        estimate = await asyncio.to_thread(
            self.typical, profile=name, kind=RunKind.SWITCH.value, outcome=Outcome.ACTIVE.value
        )
        start = "wake" if self.parking.get(name) is not None else "cold start"
        away = self._away(profiles.get(serving) if serving else None, force=force, drain=drain)
        reason = f"{serving or 'nothing'} serves now ({st.state.value}): {name} would {start}"
        head = (name, serving, st.state.value, refused is None, reason if refused is None else refused)
        return SwitchPreview(*head, refused=refused, away=away, start=start, estimate_s=estimate)

    @staticmethod
    def _away(current: LoadedProfile | None, *, force: bool, drain: bool) -> str | None:
        if current is None:
            return None
        p = current.profile
        drains = drain and not force and p.drain
        goes = "park" if p.park is not None else "stop"
        return f"drain, then {goes}" if drains else goes
