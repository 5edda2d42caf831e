"""The serving watch: after `active` the daemon keeps following every managed unit (systemd's state stream:
a crash is seen as it happens) and checks the active engine's liveness and metrics every interval. A crash
ends the serving run `crashed` and the host `failed`, then the profile's `on_failure` acts (restart with
backoff and a cap, rollback, or nothing); a hang makes the host `unhealthy` and acts only with `on_hang`;
units changed with systemctl are followed and recorded as `external` runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from daemon.core.errors import K25Error
from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile, Policy, ProfileSet
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.base import MetricsSnapshot, Readiness
from daemon.engines.client import EnginePort
from daemon.engines.excerpt import journal_excerpt
from daemon.host.journal import JournalPort
from daemon.host.systemd import SystemdPort, UnitState
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.serving.metrics import MetricsWindow
from daemon.serving.policies import Incident, Incidents
from daemon.serving.serving_run import AnswerRecorder, ParkedUnits, Sample, Serving, ServingNow
from daemon.store.models import ServingMetric
from daemon.store.serving import ServingStore

log = logging.getLogger("k25.watch")


class ServingWatch:
    def __init__(
        self,
        *,
        settings: Settings,
        systemd: SystemdPort,
        journal: JournalPort,
        engines: EnginePort,
        recorder: RunRecorder,
        store: ServingStore,
        profiles: Callable[[], ProfileSet],
        jobs: Jobs,
        incidents: Incidents,
        parking: ParkedUnits,
        answers: AnswerRecorder,
    ) -> None:
        self.settings = settings
        self.systemd = systemd
        self.journal = journal
        self.engines = engines
        self.recorder = recorder
        self.profiles = profiles
        self.hub = recorder.hub
        self.store = store
        self.answers = answers
        self.jobs = jobs
        self.incidents = incidents
        self.parking = parking
        self.serving: Serving | None = None
        self._followers: dict[str, asyncio.Task[None]] = {}
        self.unit_states: dict[str, UnitState] = {}  # the newest state of each followed unit
        self.changes = 0  # counts what /status shows of the watch (unit states, scrapes, serving runs)

    # -- lifecycle ------------------------------------------------------------------------------------

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
        if self.serving and self.serving.task:
            tasks.append(self.serving.task)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # -- serving runs (the switcher and reconciliation call these) ------------------------------------

    async def begin(
        self,
        lp: LoadedProfile,
        *,
        parent: int | None,
        adopt_run: int | None = None,
        managed: bool = True,
        loading: bool = False,
    ) -> int:
        """A profile is active: its serving run starts (or, after a daemon restart, carries on). `loading`:
        a unit started outside k25-ctl whose engine may still load; the host is active once it answers."""
        p = lp.profile
        if adopt_run is None:
            new = NewRun(RunKind.SERVING, p.name, None, parent, None, lp.sha256, p.unit)
            run_id = await self.recorder.create(new, happened=True)
            await self.recorder.event(run_id, Phase.SERVING, f"{p.unit} serving")
        else:
            run_id = adopt_run
            await self.recorder.event(run_id, Phase.SERVING, "followed again after a daemon restart")
        self.serving = Serving(run_id, lp, managed=managed)
        if not loading:
            self.serving.settled.set()
        self.serving.window = MetricsWindow(run_id, p, engine_for(p), self.settings.metrics_row_s)
        if self.settings.watch_enabled:
            self.serving.task = asyncio.create_task(self._liveness(self.serving))
        self.hub.serving(run_id)
        self.changes += 1
        return run_id

    async def end(self, outcome: Outcome, detail: str, *, host: HostAfter | None = None) -> int | None:
        """The serving run ends (a switch, a crash, an operator's stop); its last partial row is kept."""
        serving, self.serving = self.serving, None
        if serving is None:
            return None
        serving.settled.set()
        if serving.task is not None:
            serving.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving.task
        if serving.window is not None and outcome is Outcome.STOPPED:
            await self._final_scrape(serving)  # the engine still serves: count up to this moment
        if serving.window is not None and (row := serving.window.row()) is not None:
            await self.recorder.write(f"run {serving.run_id} metrics row", partial(self.store.add_row, row))
        served = time.monotonic() - serving.started
        await self.recorder.write(
            f"run {serving.run_id} served", partial(self.store.set_served, serving.run_id, served)
        )
        self.hub.serving(None)
        crashed = outcome is Outcome.CRASHED
        await self.recorder.finish(
            serving.run_id, outcome, error=detail if crashed else None, detail=detail, host=host
        )
        return serving.run_id

    def now(self) -> ServingNow | None:
        """The serving engine's current figures (the newest scrape, the newest live sample)."""
        s = self.serving
        if s is None:
            return None
        sample = s.live[-1] if s.live else None
        snap = s.last or MetricsSnapshot()
        return ServingNow(
            run_id=s.run_id,
            profile=s.lp.profile.name,
            served_s=time.monotonic() - s.started,
            tokens_per_s=sample.tokens_per_s if sample else None,
            acceptance_length=sample.acceptance_length if sample else None,
            running=snap.running,
            waiting=snap.waiting,
            kv_usage=snap.kv_usage,
            generation_tokens=snap.generation_tokens,
            acceptance_rate=sample.acceptance_rate if sample else None,
        )

    async def settled(self, name: str) -> None:
        """If `name` was started outside k25-ctl and still loads, until it answers health or ends (bounded by
        its load_timeout_s): an activate of it then finds it active instead of starting it again."""
        s = self.serving
        if s is not None and s.loading and s.lp.profile.name == name:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.settled.wait(), s.lp.profile.load_timeout_s)

    def current(self) -> LoadedProfile | None:
        """The profile whose engine serves now (its serving run is open)."""
        return self.serving.lp if self.serving is not None else None

    def series(self, run_id: int) -> list[ServingMetric]:
        """A serving run's metric rows (blocking: a thread); LookupError for no such run."""
        return self.store.series(run_id)

    def live(self, run_id: int) -> list[Sample]:
        s = self.serving
        return list(s.live) if s is not None and s.run_id == run_id else []

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
        serving = self.serving
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
        await self.begin(lp, parent=ext, managed=False, loading=True)

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
            await self.end(Outcome.STOPPED, f"{detail} (run {ext})", host=HostAfter(HostState.IDLE))
            return
        lag = (
            f"; seen {time.time() - st.exit_timestamp_us / 1e6:.3f}s after the exit"
            if st.exit_timestamp_us
            else ""
        )
        reason = f"{p.unit} exited on its own ({how}) after serving {served:.0f}s"
        log.error("%s%s", reason, lag)
        excerpt = await journal_excerpt(self.journal, serving.lp.profile, [])
        run_id = await self.end(
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

    # -- liveness and metrics --------------------------------------------------------------------------

    async def _liveness(self, serving: Serving) -> None:
        s = self.settings
        p, engine = serving.lp.profile, engine_for(serving.lp.profile)
        fails, last_gen, moved = 0, None, time.monotonic()
        # The first scrape at once (the serving run's counters start where it starts), then one a period.
        while True:
            code, bodies = await asyncio.gather(
                self.engines.health(p, engine, timeout_s=s.health_timeout_s),
                self.engines.scrape(p, engine, timeout_s=s.health_timeout_s),
            )
            now = time.monotonic()
            fails = 0 if engine.readiness(code) is Readiness.HEALTHY else fails + 1
            if serving.loading and (fails == 0 or now - serving.started > p.load_timeout_s):
                await self._loaded(serving, fails == 0)
            if serving.loading:
                fails = 0  # a loading engine does not answer yet: that is no failure
            evidence = (
                f"health failed {fails} times in a row (last answer: {code or 'none'})"
                if fails >= s.health_failures
                else None
            )
            snap = engine.snapshot(p, bodies) if bodies else None
            if snap is not None:
                await self._record(serving, snap, now)
                gen, running = snap.generation_tokens, snap.running or 0
                if gen != last_gen or running == 0:
                    last_gen, moved = gen, now
                elif now - moved >= s.stall_s:
                    evidence = (
                        f"{running:.0f} request(s) running but no token generated for {now - moved:.0f}s "
                        f"(generation counter at {gen:.0f})"
                    )
            await self._health(serving, evidence)
            await asyncio.sleep(s.watch_interval_s)  # the watch's period: liveness has no event to wait for

    async def _loaded(self, serving: Serving, healthy: bool) -> None:
        """An engine started outside k25-ctl answers health (or its load_timeout_s passed): the host is
        active, and the liveness rules apply from here on."""
        p = serving.lp.profile
        why = (
            "answers health"
            if healthy
            else f"has not answered health within load_timeout_s {p.load_timeout_s:g}s"
        )
        log.info("run %d: %s (started outside k25-ctl) %s: active", serving.run_id, p.name, why)
        if healthy:
            await self.answers.record_adopted(serving.run_id, serving.lp)
        await self.recorder.event(serving.run_id, Phase.SERVING, f"{why}: active")
        self.recorder.settle(HostAfter(HostState.ACTIVE, p.name))
        serving.settled.set()

    async def _final_scrape(self, serving: Serving) -> None:
        p = serving.lp.profile
        engine = engine_for(p)
        with contextlib.suppress(Exception):  # the engine may be going away: then the last row stands
            bodies = await self.engines.scrape(p, engine, timeout_s=self.settings.health_timeout_s)
            if bodies:
                await self._record(serving, engine.snapshot(p, bodies), time.monotonic())

    async def _record(self, serving: Serving, snap: MetricsSnapshot, now: float) -> None:
        window = serving.window
        assert window is not None  # noqa: S101 - set with the serving run
        before = serving.last
        serving.last = snap
        self.changes += 1
        row = window.add(snap, now, datetime.now(UTC))
        if row is not None:
            await self.recorder.write(f"run {serving.run_id} metrics row", partial(self.store.add_row, row))
        if before is not None and (seconds := self.settings.watch_interval_s) > 0:
            usage = window.engine.usage_delta(window.profile, before, snap)
            tps = max(0.0, usage.generation_tokens) / seconds
            serving.live.append(
                Sample(time.time(), tps, usage.acceptance_length, snap.running, usage.normalized_rate)
            )

    async def _health(self, serving: Serving, evidence: str | None) -> None:
        state = self.hub.status.state
        if evidence and state is HostState.ACTIVE:
            log.warning("run %d: %s unhealthy: %s", serving.run_id, serving.lp.profile.name, evidence)
            await self.recorder.event(serving.run_id, Phase.UNHEALTHY, evidence)
            self.hub.health(HostState.UNHEALTHY, evidence)
            on_hang = serving.lp.profile.on_hang
            if on_hang is not Policy.NONE and serving.managed and not serving.hang_acted:
                serving.hang_acted = True
                self.incidents.report(Incident(on_hang, serving.lp, serving.run_id, "on_hang"))
        elif not evidence and state is HostState.UNHEALTHY:
            await self.recorder.event(serving.run_id, Phase.SERVING, "healthy again")
            self.hub.health(HostState.ACTIVE, None)
