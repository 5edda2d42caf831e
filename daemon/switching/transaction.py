"""The activation transaction: stop -> teardown -> start -> loading -> probing -> active, every step recorded
through the RunRecorder as it happens; on failure, timeout, cancel or any error: the journal excerpt, stop,
teardown, and one rollback to the last known-good profile as a linked run; if that fails too, `degraded`.
One at a time. Profiles are read afresh for each switch, and the engine execs exactly the recorded argv."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator

from daemon.core.errors import K25Error, Refused
from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile, ProfileSet, WarmMode
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.engines import engine_for
from daemon.engines.excerpt import journal_excerpt
from daemon.parking.service import Parking
from daemon.proving.known_answer import KnownAnswers
from daemon.runs.events import RunEvents as _Events
from daemon.runs.jobs import JobKind, Jobs, Slot
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.store.queries import Store
from daemon.switching.bringup import BringUpFailed, bring_up
from daemon.switching.clearing import stop_and_teardown
from daemon.switching.contracts import ServingHooks, SwitchFailed, SwitchHost, UnitFollowing, WarmHook
from daemon.switching.drain import DrainTimes, drain_for_switch
from daemon.switching.state import SwitchState
from daemon.switching.upgrades import notice_upgrade

log = logging.getLogger("k25.switch")


class Switcher:
    def __init__(
        self,
        *,
        profiles: Callable[[], Awaitable[ProfileSet]],
        host: SwitchHost,
        store: Store,
        recorder: RunRecorder,
        default_profile: str,
        stop_timeout_s: float,
        write_launch: Callable[[LoadedProfile, int, list[str]], object],
        serving: ServingHooks,
        units: UnitFollowing,
        jobs: Jobs,
        drain: DrainTimes,
        parking: Parking,
        answers: KnownAnswers,
        engine_version: Callable[[str], str | None],
        warm: WarmHook | None = None,
    ) -> None:
        self._read_profiles = profiles
        self._engine_version = engine_version  # each profile's engine as installed (daemon/installed/)
        self.host = host
        self.store = store
        self.recorder = recorder
        self.hub = recorder.hub
        self.default_profile = default_profile
        self.stop_timeout_s = stop_timeout_s
        self._write_launch = write_launch
        self.serving = serving
        self.units = units
        self.jobs = jobs
        self.drain_times = drain
        self.warm = warm  # reads a profile's weights into the page cache while the old engine stops
        self.parking = parking
        self.answers = answers  # recorded after each cold start; asked again after a wake

    # -- requests -------------------------------------------------------------------------------------

    async def activate(
        self,
        name: str,
        *,
        force: bool = False,
        kind: RunKind = RunKind.SWITCH,
        parent: int | None = None,
        from_profile: str | None = None,
        drain: bool = True,
        unhealthy_gpus_ok: bool = False,
    ) -> int | None:
        """Start a switch (or a restart or rollback the serving watch asks for, linked to `parent`); returns
        its run id, or None when `name` is already active and healthy. The serving engine drains first
        unless `drain` is False, `force` is given or its profile says `drain = false`. No engine starts on
        a GPU that needs a reset unless `unhealthy_gpus_ok` (a forced activate by hand; never a policy)."""
        profiles = await self.read_profiles()  # afresh: the file as it is now is what runs
        lp = profiles.require(name)
        if self.hub.status.state is HostState.NEEDS_RESET:
            raise Refused(f"the host needs a GPU reset or reboot: {self.hub.status.reason}")
        if (unhealthy := self.host.gpus.blocked(lp.profile.gpus)) and not unhealthy_gpus_ok:
            log.error("%s not started: %s", name, unhealthy)
            raise Refused(f"{name} not started: {unhealthy} (reset it: k25-ctl gpus reset; or force)")
        if not force:  # started by hand and loading: it is this profile, soon active; not started again
            await self.serving.settled(name)
        # nothing to do needs no place in the queue (a switch that just ended holds it)
        if not force and await self.serves(lp):
            return None
        # From its admission to its task's start a switch runs to the end of the section whatever befalls
        # the caller: a cancel there (an experiment cancelled as it asked for its switch) left the run
        # created and never ended, the host switching (the simulation's seed 2026, step 1658).
        starting = self._start(name, lp, profiles, kind, parent, from_profile, drain=drain and not force)
        return await asyncio.shield(starting)

    async def _start(
        self,
        name: str,
        lp: LoadedProfile,
        profiles: ProfileSet,
        kind: RunKind,
        parent: int | None,
        from_profile: str | None,
        *,
        drain: bool,
    ) -> int:
        # An operator's switch waits for a benchmark; a job's own switch and the watch's do not.
        with self._admit(name, parent, profiles) as (slot, txn):
            st = self.hub.status
            previous = from_profile or st.active_profile
            serving = self.serving.current() if st.state is HostState.ACTIVE else None
            txn.leave_rotation(serving, in_rotation=not self.jobs.out_of_rotation(), drain=drain)
            run_id = await self._new_run(kind, lp, from_profile=previous, parent=parent)
            self.recorder.begin(run_id, name)
            if txn.out_at is not None:
                await self.recorder.out_of_rotation(run_id, txn.out_at)
            slot.start(run_id, self._transaction(run_id, lp, previous, txn))
            return run_id

    async def serves(self, lp: LoadedProfile) -> bool:
        """`lp` is the active, healthy profile and its unit runs: activating it is a no-op."""
        st = self.hub.status
        if st.state is not HostState.ACTIVE or st.active_profile != lp.profile.name:
            return False
        return (await self.host.systemd.state(lp.profile.unit)).is_active

    @contextlib.contextmanager
    def _admit(
        self, name: str, parent: int | None, profiles: ProfileSet
    ) -> Iterator[tuple[Slot, SwitchState]]:
        txn = SwitchState(profiles=profiles)
        with self.jobs.admit(
            JobKind.SWITCH, parent=parent, subject=name, label=f"switch to {name}", refuse_cancel=txn.refusal
        ) as slot:
            yield slot, txn

    async def resume(
        self,
        lp: LoadedProfile,
        profiles: ProfileSet,
        *,
        parent: int,
        from_profile: str | None,
        woke: bool = False,
    ) -> int:
        """After a daemon restart mid-start: the engine that run `parent` started (or `woke`) still runs but
        was never proven ready. A new run follows it (no stop, no start) through loading and the probe; a
        woken one must also give its known answer, else it is started cold."""
        with self._admit(lp.profile.name, parent, profiles) as (slot, txn):
            run_id = await self._new_run(RunKind.SWITCH, lp, from_profile=from_profile, parent=parent)
            self.recorder.begin(run_id, lp.profile.name)
            await self.recorder.event(
                run_id, Phase.CREATED, f"resumes run {parent}: the daemon restarted while its engine started"
            )
            txn.resumed_wake = woke
            slot.start(run_id, self._transaction(run_id, lp, from_profile, txn, resume=True))
            return run_id

    async def read_profiles(self) -> ProfileSet:
        """The profiles folder, read once per switch; every profile a switch can start is followed."""
        profiles = await self._read_profiles()
        self.units.follow_units()
        return profiles

    # -- the transaction -------------------------------------------------------------------------------

    async def _new_run(
        self, kind: RunKind, lp: LoadedProfile, *, from_profile: str | None, parent: int | None = None
    ) -> int:
        p = lp.profile
        version = self._engine_version(p.name)
        new = NewRun(kind, p.name, from_profile, parent, engine_for(p).argv(p), lp.sha256, p.unit, version)
        run_id = await self.recorder.create(new)
        await notice_upgrade(self.recorder, run_id, p.name, version)
        return run_id

    async def _transaction(
        self, run_id: int, lp: LoadedProfile, previous: str | None, txn: SwitchState, *, resume: bool = False
    ) -> None:
        try:
            if not await drain_for_switch(run_id, self.recorder, self.host.prober, self.drain_times, txn):
                return  # cancelled while draining: nothing was stopped
            # Ending the serving run reads the engine's last figures (seconds, if it hangs): a cancel then
            # would leave the run unended and the host switching, so it is refused until the attempt starts.
            txn.stepping = "ending the serving run before the stop"
            await self.serving.end(Outcome.STOPPED, f"switched away by run {run_id} (to {lp.profile.name})")
            txn.stepping = None
            failure = await self._attempt(run_id, lp, txn, cancellable=True, resume=resume)
            if failure is None:
                return
            txn.rolling_back = True  # from here on a cancel is refused (and a second one was already)
            await self._recover(run_id, lp, *failure, previous, txn)
        except Exception as e:  # recording the failure failed too (the database, a bug): never stay switching
            log.exception("run %d: could not record the end of the switch", run_id)
            why = f"run {run_id} ended in an internal error: {type(e).__name__}: {e}"
            self.recorder.settle(HostAfter(HostState.DEGRADED, None, why))

    async def _attempt(
        self, run_id: int, lp: LoadedProfile, txn: SwitchState, *, cancellable: bool, resume: bool = False
    ) -> tuple[Outcome, SwitchFailed] | None:
        """One switch; any way it can fail becomes (outcome, SwitchFailed)."""
        try:
            await self._switch(run_id, lp, txn, resume=resume)
            return None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not cancellable or task is None:
                raise
            task.uncancel()
            return Outcome.CANCELLED, SwitchFailed("cancelled by request")
        except SwitchFailed as e:
            return Outcome.FAILED, e
        except K25Error as e:
            return Outcome.FAILED, SwitchFailed(str(e))
        except Exception as e:  # a bug or an OS error: the run fails with it, recorded and logged
            log.exception("run %d: internal error during the switch", run_id)
            return Outcome.FAILED, SwitchFailed(f"internal error: {type(e).__name__}: {e}")

    async def _recover(
        self,
        run_id: int,
        lp: LoadedProfile,
        outcome: Outcome,
        failure: SwitchFailed,
        previous: str | None,
        txn: SwitchState,
    ) -> None:
        """After a failed switch: clean up, then link and start the rollback before the run's final event."""
        error = await self._cleanup(run_id, lp, failure, txn)
        if failure.needs_reset:
            await self.recorder.finish(
                run_id, outcome, error=error, host=HostAfter(HostState.NEEDS_RESET, None, failure.reason)
            )
            return
        target = await self.rollback_target(lp.profile.name, previous, txn.profiles)
        if target is None:
            reason = f"{lp.profile.name}: {failure.reason}; no known-good profile to return to"
            await self.recorder.finish(
                run_id, outcome, error=error, host=HostAfter(HostState.DEGRADED, None, reason)
            )
            return
        rb = await self._new_run(RunKind.ROLLBACK, target, from_profile=lp.profile.name, parent=run_id)
        await self.recorder.event(run_id, Phase.ROLLBACK, f"rolling back to {target.profile.name} (run {rb})")
        await self.recorder.finish(run_id, outcome, error=error, rollback_run_id=rb)
        if (job := self.jobs.find(run_id)) is not None:
            job.carry_on(rb, f"rollback to {target.profile.name}")  # the job's 409 names the rollback now
        self.recorder.begin(rb, target.profile.name)
        second = await self._attempt(rb, target, txn, cancellable=False)
        if second is None:
            return
        _, again = second
        rb_error = await self._cleanup(rb, target, again, txn)
        state = HostState.NEEDS_RESET if again.needs_reset else HostState.DEGRADED
        reason = (
            f"switch failed ({failure.reason}); rollback to {target.profile.name} failed "
            f"({again.reason}); no engine runs, no further attempt"
        )
        await self.recorder.finish(rb, Outcome.FAILED, error=rb_error, host=HostAfter(state, None, reason))

    async def _cleanup(self, run_id: int, lp: LoadedProfile, failure: SwitchFailed, txn: SwitchState) -> str:
        """Stop the unit that failed and tear down again; returns the run's error text."""
        await self.recorder.event(run_id, Phase.CLEANUP, failure.reason)
        excerpt = failure.excerpt or failure.reason
        if not failure.needs_reset:
            try:
                await self._stop_and_teardown(run_id, txn, tuple(lp.profile.gpus))
            except SwitchFailed as e:
                failure.needs_reset = e.needs_reset
                excerpt += f"\n[cleanup] {e.reason}"
            except Exception as e:
                log.exception("run %d: cleanup failed", run_id)
                excerpt += f"\n[cleanup] {type(e).__name__}: {e}"
        return f"{failure.reason}\n{excerpt}" if failure.excerpt else excerpt

    async def rollback_target(
        self, failed: str, previous: str | None, profiles: ProfileSet | None = None
    ) -> LoadedProfile | None:
        """The profile a failure returns to: the previous one, the last good one, or the default (from
        `profiles`, a switch's own set; read afresh without)."""
        profiles = profiles or await self.read_profiles()
        last_good = await asyncio.to_thread(self.store.last_good_profile)
        for name in (previous, last_good, self.default_profile):
            if name and name != failed and (lp := profiles.get(name)) is not None:
                return lp
        return None

    async def _switch(
        self, run_id: int, lp: LoadedProfile, txn: SwitchState, *, resume: bool = False
    ) -> None:
        p = lp.profile
        engine = engine_for(p)
        events = _Events(self.recorder, run_id)
        if not resume:
            if (leaving := txn.park_from) is not None and leaving.profile.name != p.name:
                txn.park_from = None  # once: a rollback in the same transaction parks nothing
                await self.parking.park(run_id, leaving, p)
            if self.parking.get(p.name) is not None and await self._wake(run_id, lp, txn):
                return
            await self.parking.make_room(run_id, p)
            # A warm of the target's weights runs while the old engine stops; the start waits for it.
            warming: asyncio.Task[None] | None = (
                asyncio.create_task(self.warm(run_id, p, events.stage))
                if self.warm is not None and p.warm is not WarmMode.OFF
                else None
            )
            try:
                await self._stop_and_teardown(run_id, txn, gpus=tuple(p.gpus), tcp_ports=(p.port,))
                await asyncio.to_thread(self._write_launch, lp, run_id, engine.argv(p))
                with contextlib.suppress(K25Error):  # a unit left failed earlier may start again
                    await self.host.systemd.reset_failed(p.unit)
                if warming is not None:
                    await warming
            finally:
                if warming is not None and not warming.done():
                    warming.cancel()
        try:
            seen = await bring_up(
                p,
                engine,
                systemd=self.host.systemd,
                journal=self.host.journal,
                prober=self.host.prober,
                events=events,
                start=not resume,
            )
        except BringUpFailed as e:
            raise SwitchFailed(e.reason, await journal_excerpt(self.host.journal, p, e.errors)) from e
        if txn.resumed_wake:
            txn.resumed_wake = False
            if why := await self.answers.check(run_id, lp, events):
                log.warning(
                    "run %d: %s after the interrupted wake: %s; starting it cold", run_id, p.name, why
                )
                await events.phase(Phase.WAKING, f"wake not proven: {why}; stopping it for a cold start")
                await self._switch(run_id, lp, txn)
                return
        else:
            await self.answers.record(run_id, lp, events)
        await self._active(run_id, lp, txn, seen.load_seconds)

    async def _wake(self, run_id: int, lp: LoadedProfile, txn: SwitchState) -> bool:
        """The target is parked: clear the GPUs around it and wake it; False when the wake failed (it was
        stopped, recorded) and the switch goes on with a cold start."""
        await self._stop_and_teardown(run_id, txn, gpus=tuple(lp.profile.gpus))
        seconds = await self.parking.wake(run_id, lp)
        if seconds is None:
            return False
        await self._active(run_id, lp, txn, seconds)
        return True

    async def _active(
        self, run_id: int, lp: LoadedProfile, txn: SwitchState, load_seconds: float | None
    ) -> None:
        """The switch's last records come before its final event: whoever sees the run end `active` finds
        its serving run and its downtime there (/ready turns 200 with the final event, ms later)."""
        if txn.out_at is not None:  # it left the rotation (no job could have taken it out meanwhile)
            await self.recorder.back_in_rotation(run_id, txn.out_at)
        await self.serving.begin(lp, parent=run_id)
        await self.recorder.finish(
            run_id,
            Outcome.ACTIVE,
            load_seconds=load_seconds,
            host=HostAfter(HostState.ACTIVE, lp.profile.name),
        )

    async def _stop_and_teardown(
        self, run_id: int, txn: SwitchState, gpus: tuple[int, ...] | None, tcp_ports: tuple[int, ...] = ()
    ) -> None:
        units = tuple(dict.fromkeys(lp.profile.unit for lp in txn.profiles.valid.values()))
        spared = await self.parking.spared()
        await stop_and_teardown(
            run_id,
            host=self.host,
            recorder=self.recorder,
            units=units,
            spared=spared,
            spared_units=self.parking.units(),
            gpus=gpus,
            tcp_ports=tcp_ports,
            stop_timeout_s=self.stop_timeout_s,
        )
