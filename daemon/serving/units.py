"""The unit follower: every managed unit's state, followed from systemd's stream as it changes (a crash is
seen as it happens). The serving unit gone down ends its serving run: stopped outside k25-ctl, or crashed,
the host `failed` and the profile's `on_failure` reported (restart with backoff and a cap, rollback, or
nothing); a parked unit gone down is no longer parked; units started with systemctl are followed and
recorded as `external` runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from daemon.core.errors import K25Error
from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile, Policy, ProfileSet
from daemon.core.run_types import NewRun, Outcome, RunKind
from daemon.core.settings import Settings
from daemon.engines.excerpt import journal_excerpt
from daemon.health.gate import GpuGate
from daemon.host.journal import JournalPort
from daemon.host.systemd import SystemdPort, UnitState
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.serving.policies import Incident, Incidents
from daemon.serving.serving_run import ParkedUnits, Serving
from daemon.serving.watch import ServingWatch

log = logging.getLogger("k25.watch")
CAUSE_WAIT_S = 1.0  # how long a crash waits for the Xid that may explain it (the kernel log's lag)


class UnitFollower:
    def __init__(
        self,
        *,
        settings: Settings,
        systemd: SystemdPort,
        journal: JournalPort,
        recorder: RunRecorder,
        profiles: Callable[[], ProfileSet],
        jobs: Jobs,
        incidents: Incidents,
        parking: ParkedUnits,
        serving: ServingWatch,
        gpus: GpuGate,
    ) -> None:
        self.settings = settings
        self.gpus = gpus  # the GPUs' health: names the Xid that crashed an engine
        self.systemd = systemd
        self.journal = journal
        self.recorder = recorder
        self.hub = recorder.hub
        self.profiles = profiles
        self.jobs = jobs
        self.incidents = incidents
        self.parking = parking
        self.watch = serving
        self._followers: dict[str, asyncio.Task[None]] = {}
        self.unit_states: dict[str, UnitState] = {}  # the newest state of each followed unit
        self.changes = 0  # counts what /status shows of the units

    def follow_units(self) -> None:
        """One follower per managed unit (called at start and after each profile reload)."""
        if not self.settings.watch_enabled:
            return
        units = {lp.profile.unit for lp in self.profiles().valid.values()}
        for unit in set(self._followers) - units:
            self._followers.pop(unit).cancel()
            self.unit_states.pop(unit, None)
        for unit in units - set(self._followers):
            self._followers[unit] = asyncio.create_task(self._follow(unit))

    async def close(self) -> None:
        tasks = [*self._followers.values()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- unit states -----------------------------------------------------------------------------------

    async def _follow(self, unit: str) -> None:
        while True:
            try:
                async with self.systemd.watch(unit) as states:
                    async for st in states:
                        self.unit_states[unit] = st
                        self.changes += 1
                        await self._on_unit(unit, st)
            except asyncio.CancelledError:
                raise
            except Exception:  # a D-Bus hiccup must not end the watch: follow again
                log.exception("following %s failed; following it again", unit)
                await asyncio.sleep(1.0)

    def _profile_of(self, unit: str) -> LoadedProfile | None:
        return next((lp for lp in self.profiles().valid.values() if lp.profile.unit == unit), None)

    async def _on_unit(self, unit: str, st: UnitState) -> None:
        """A switch drives the units while it runs: their changes then are its own. What is left when it
        ends (a crash right after it settled) is acted on then, on the unit as it is by that time."""
        while True:
            await self.jobs.no_switch()
            try:
                st = self.unit_states[unit] = await self.systemd.state(unit)
                self.changes += 1
            except K25Error:
                return
            if not self.jobs.switching:
                break
        serving = self.watch.open()
        if serving is not None and unit == serving.unit:
            if st.is_down:
                await self._unit_down(serving, st)
            return
        if self.parking.of_unit(unit) is not None:
            if st.is_down:  # a parked engine died (or was stopped by hand): recorded, no longer parked
                how = (
                    f"{unit} went {st.active_state} while parked "
                    f"(result {st.result}, status {st.exec_main_status})"
                )
                await self.parking.lost(unit, how)
                lp = self._profile_of(unit)
                if lp is not None:
                    await self._external(lp, how, Outcome.OK if st.result == "success" else Outcome.CRASHED)
            return
        if not st.is_up:
            if unit in self.hub.status.conflicts:
                self.hub.conflicts(tuple(u for u in self.hub.status.conflicts if u != unit))
            return
        lp = self._profile_of(unit)
        if lp is None:
            return
        what = f"{unit} {st.active_state} ({st.sub_state}, main PID {st.main_pid}), not started by k25-ctl"
        if serving is not None:
            if unit not in self.hub.status.conflicts:
                log.warning("conflict: %s while %s is active", what, serving.lp.profile.name)
                self.hub.conflicts((*self.hub.status.conflicts, unit))
                await self._external(lp, f"{what}; conflicts with the active {serving.lp.profile.name}")
            return
        if self.hub.status.state in (HostState.NEEDS_RESET, HostState.SWITCHING):
            return
        # Its engine may still be loading (a unit is active when its process starts): the host becomes active
        # when the engine answers health; an activate or an experiment of this profile meanwhile waits for it.
        ext = await self._external(lp, f"{what}: followed; active once its engine answers health")
        self.recorder.settle(
            HostAfter(
                HostState.IDLE,
                None,
                f"{lp.profile.name}: started outside k25-ctl, loading; active once its engine answers health",
            )
        )
        await self.watch.begin(lp, parent=ext, managed=False, loading=True)

    async def _external(self, lp: LoadedProfile, detail: str, outcome: Outcome = Outcome.OK) -> int:
        p = lp.profile
        run_id = await self.recorder.create(
            NewRun(RunKind.EXTERNAL, p.name, None, None, None, lp.sha256, p.unit), happened=True
        )
        await self.recorder.finish(run_id, outcome, error=detail)
        return run_id

    async def _unit_down(self, serving: Serving, st: UnitState) -> None:
        p = serving.lp.profile
        served = time.monotonic() - serving.started
        how = f"{st.active_state}, result {st.result}, status {st.exec_main_status}"
        # A stop (systemctl stop; "timeout" when it had to SIGKILL) ends with success or timeout; an engine
        # that died on its own ends with exit-code, signal, core-dump, oom-kill...
        if st.result in ("success", "timeout"):
            detail = f"{p.unit} stopped outside k25-ctl ({how}) after serving {served:.0f}s"
            ext = await self._external(serving.lp, detail)
            await self.watch.end(Outcome.STOPPED, f"{detail} (run {ext})", host=HostAfter(HostState.IDLE))
            return
        lag = (
            f"; seen {time.time() - st.exit_timestamp_us / 1e6:.3f}s after the exit"
            if st.exit_timestamp_us
            else ""
        )
        reason = f"{p.unit} exited on its own ({how}) after serving {served:.0f}s"
        ended = st.exit_timestamp_us / 1e6 if st.exit_timestamp_us else time.time()
        if cause := await self.gpus.cause(list(p.gpus), ended, wait_s=CAUSE_WAIT_S):
            reason += f": {cause}"
        log.error("%s%s", reason, lag)
        excerpt = await journal_excerpt(self.journal, serving.lp.profile, [])
        run_id = await self.watch.end(
            Outcome.CRASHED,
            f"{reason}\n{excerpt}".strip(),
            host=HostAfter(HostState.FAILED, None, reason),
        )
        if not serving.managed:  # the operator started it by hand: follow and record, never fight them
            log.warning("run %s: %s was started outside k25-ctl: no automatic action", run_id, p.name)
            return
        default = Policy.RESTART if p.name == self.settings.default_profile else Policy.ROLLBACK
        policy = p.on_failure or default
        self.incidents.report(Incident(policy, serving.lp, run_id, "on_failure"))
