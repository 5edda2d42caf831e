"""Parking: a switch away from a parkable engine puts it to sleep instead of stopping it, so that the way
back is a wake (seconds) instead of a cold start (minutes). It is an optimisation only: every guard that
fails (too many parked, the target needs its port or does not fit beside it, host RAM short, requests in
flight, the sleep refused or its memory still held, a failed wake, probe or acceptance) ends in the
normal stop or cold start, with the reason recorded on the run. A switch never fails because of it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from daemon.core.errors import K25Error, NotFound
from daemon.core.hoststate import ParkedInfo
from daemon.core.profiles import LoadedProfile, Profile, ProfileSet
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.engines import engine_for
from daemon.engines.base import Engine
from daemon.engines.client import EnginePort
from daemon.engines.engine_types import ParkCalls
from daemon.engines.probing import in_flight
from daemon.host.systemd import SystemdPort
from daemon.parking import guards, levels
from daemon.parking.budget import RamBudget, RamPlan
from daemon.parking.costs import Way
from daemon.parking.forecast import ParkForecast, said
from daemon.parking.levels import at_level
from daemon.parking.readopt import still_parked
from daemon.parking.waking import woken
from daemon.proving.known_answer import KnownAnswers
from daemon.proving.sleep import NotParked, asleep
from daemon.runs.events import RunEvents
from daemon.runs.jobs import JobKind, Jobs
from daemon.runs.recorder import RunRecorder
from daemon.store.parked import ParkedStore
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import Parked

log = logging.getLogger("k25.park")
GIB = 1024**3


@dataclass(frozen=True)
class _Entry:
    info: ParkedInfo
    profile: Profile  # as its file says now (after a restart) or said when it was parked
    sha256: str  # of the file it was started from
    way: Way | None = None  # how it parked, as predicted (None: readopted after a restart)


def _since(info: ParkedInfo) -> str:
    return datetime.fromtimestamp(info.since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class Parking:
    def __init__(
        self,
        *,
        systemd: SystemdPort,
        teardown: Teardown,
        prober: EnginePort,
        recorder: RunRecorder,
        store: ParkedStore,
        jobs: Jobs,
        answers: KnownAnswers,
        budget: RamBudget,
        forecast: ParkForecast,
        max_parked: int | None,
        stop_timeout_s: float,
    ) -> None:
        self.systemd = systemd
        self.teardown = teardown
        self.prober = prober
        self.recorder = recorder
        self.store = store
        self.jobs = jobs
        self.answers = answers  # every wake is proven by the answer recorded after the cold start
        self.budget = budget  # host RAM for pinned weights: as many park as fit
        self.forecast = forecast  # each park and wake says what the host's rates predicted
        self.max_parked = max_parked
        self.stop_timeout_s = stop_timeout_s
        self._parked: dict[str, _Entry] = {}

    def get(self, name: str) -> ParkedInfo | None:
        entry = self._parked.get(name)
        return entry.info if entry else None

    def of_unit(self, unit: str) -> ParkedInfo | None:
        return next((e.info for e in self._parked.values() if e.info.unit == unit), None)

    def units(self) -> frozenset[str]:
        return frozenset(e.info.unit for e in self._parked.values())

    async def spared(self) -> tuple[Parked, ...]:
        """What a teardown must spare: each parked unit's processes (its cgroup now), and its residual."""
        out = []
        for info in (e.info for e in self._parked.values()):
            pids = {info.main_pid}
            try:
                cg = (await self.systemd.state(info.unit)).control_group
                pids.update(await asyncio.to_thread(self.teardown.cgroup_pids, cg) if cg else ())
            except K25Error as e:
                log.warning(
                    "parked %s: cannot read its unit (%s): sparing its main PID only", info.profile, e
                )
            reason = f"parked profile {info.profile} (sleeping since {_since(info)})"
            out.append(Parked(reason, frozenset(pids), info.gpu_mib))
        return tuple(out)

    async def _set(self, entry: _Entry) -> None:
        self._parked[entry.info.profile] = entry
        await asyncio.to_thread(self.store.save, entry.info, entry.sha256)
        self._publish()

    async def _forget(self, name: str) -> ParkedInfo | None:
        entry = self._parked.pop(name, None)
        await asyncio.to_thread(self.store.remove, name)
        self._publish()
        return entry.info if entry else None

    def _publish(self) -> None:
        infos = tuple(e.info for e in self._parked.values())
        self.recorder.hub.parked(infos, self.budget.of(infos))

    # -- park on switch-away ---------------------------------------------------------------------------

    async def park(self, run_id: int, lp: LoadedProfile, target: Profile) -> bool:
        """Put the engine of `lp` (drained, no longer serving) to sleep; False when it is not parkable or a
        guard refused (recorded): then the caller stops it as usual."""
        p, engine = lp.profile, engine_for(lp.profile)
        if engine.park_calls(p) is None:
            return False
        events = RunEvents(self.recorder, run_id)
        try:
            p = await self._level(p, target, events)
            calls = engine.park_calls(p)
            if calls is None:
                return False
            plan = await self._guards(p, target, engine)
            for old in plan.evict:
                await self.release(run_id, old.profile, self.budget.reason(p, plan))
            await self.answers.prime(lp)  # its prefix cached: a stale cache after the wake shows
            await events.phase(
                Phase.PARKING, f"putting {p.name} to sleep (level {p.park_level}) instead of stopping it"
            )
            began = time.monotonic()
            info = await self._sleep(run_id, p, lp.sha256, calls, plan.ram_bytes)
        except NotParked as e:
            log.warning("run %d: not parking %s: %s; it is stopped instead", run_id, p.name, e)
            await events.phase(Phase.PARKING, f"not parked: {e}; stopping {p.name} instead")
            return False
        took = time.monotonic() - began
        way = await asyncio.to_thread(self.forecast.way, p, info.main_pid)
        self.forecast.parked(info.main_pid)
        await self._set(_Entry(info, p, lp.sha256, way))
        held = ", ".join(f"GPU {g}: {mib} MiB" for g, mib in sorted(info.gpu_mib.items()))
        detail = f"parked {p.name} (main PID {info.main_pid}) {said(took, way, wake=False)}; "
        detail += f"still held: {held or 'nothing'}"
        if info.host_ram_bytes:
            detail += f"; {info.host_ram_bytes / GIB:.1f} GiB of weights in host RAM"
        log.info("run %d: %s", run_id, detail)
        await events.phase(Phase.PARKING, detail)
        return True

    async def _level(self, p: Profile, target: Profile, events: RunEvents) -> Profile:
        """`park_level = "auto"` decided for this park (levels.py) and said on the run; otherwise `p`."""
        if p.park_level != "auto":
            return p
        pid = (await self.systemd.state(p.unit)).main_pid
        others = [(e.profile, e.info) for name, e in self._parked.items() if name != target.name]
        p, why = await levels.decide(
            p, main_pid=pid, forecast=self.forecast, budget=self.budget, parked=others
        )
        await events.phase(Phase.PARKING, why)
        return p

    async def _guards(self, p: Profile, target: Profile, engine: Engine) -> RamPlan:
        """Every guard before the sleep; the weight bytes it will pin in host RAM (0: none) and the parked
        engines to stop first for them (the least recently used)."""
        others = [e.info for name, e in self._parked.items() if name != target.name]  # a target wakes next
        if why := guards.max_parked_problem([o.profile for o in others], self.max_parked):
            raise NotParked(why)
        if why := guards.port_problem(target, p):
            raise NotParked(why)
        bound = {g: p.park_residual_mib for g in p.gpus}
        await self._fits(target, bound)
        plan = RamPlan(0)
        if engine.park_pins_weights(p):
            try:
                plan = await self.budget.plan(p, others)
            except guards.NoRoom as e:
                raise NotParked(str(e)) from None
        if busy := await in_flight(p, self.prober):
            raise NotParked(
                f"{busy} request(s) still in flight: a sleep with requests in flight crashes "
                "workers (vllm-project/vllm#28714)"
            )
        return plan

    async def _fits(self, target: Profile, held: dict[int, int]) -> None:
        for info in (e.info for e in self._parked.values()):
            for g, mib in info.gpu_mib.items():
                held[g] = held.get(g, 0) + mib
        fraction = engine_for(target).memory_fraction(target)
        if fraction is None:
            return
        td = self.teardown
        try:
            gpus = await asyncio.to_thread(td.gpus.gpus, light=True)
        except K25Error as e:
            raise NotParked(f"the GPUs cannot be read to check that {target.name} fits: {e}") from e
        if why := guards.fit_problem(target, fraction, gpus, td.idle_mib, held):
            raise NotParked(why)

    async def _sleep(self, run_id: int, p: Profile, sha256: str, calls: ParkCalls, ram: int) -> ParkedInfo:
        """The sleep and its proof. Recorded in the store before the call (with the residual it may keep),
        so that a daemon that dies meanwhile readopts an engine that sleeps as parked, not as active."""
        st = await self.systemd.state(p.unit)
        bound = {g: p.park_residual_mib for g in p.gpus}
        info = ParkedInfo(p.name, p.unit, time.time(), int(p.park_level), st.main_pid, bound, ram, run_id)
        await asyncio.to_thread(self.store.save, info, sha256)
        try:
            measured = await asleep(
                self.prober, self.teardown, p, calls, (st.main_pid, st.control_group), await self.spared()
            )
        except BaseException:
            await asyncio.to_thread(self.store.remove, p.name)
            raise
        return replace(info, gpu_mib=measured)

    # -- the way back ------------------------------------------------------------------------------------

    async def wake(self, run_id: int, lp: LoadedProfile) -> float | None:
        """Wake the parked engine of `lp` and prove it serves (a generation; for a speculative profile a
        non-zero acceptance too). The wake's seconds, or None: then it was stopped (recorded) and the caller
        starts it cold."""
        p = lp.profile
        entry = self._parked.get(p.name)
        if entry is None:
            return None
        calls = engine_for(p).park_calls(at_level(p, entry.info.level))  # the level it parked at
        events = RunEvents(self.recorder, run_id)
        info = entry.info
        await events.phase(
            Phase.WAKING, f"waking {p.name} (parked since {_since(info)}, main PID {info.main_pid})"
        )
        try:
            if calls is None or entry.sha256 != lp.sha256:
                raise NotParked("its profile file changed since it was parked: it starts afresh")
            seconds = await woken(self.prober, self.answers, run_id, lp, calls, events)
        except NotParked as e:
            log.warning("run %d: wake of %s failed: %s; cold start instead", run_id, p.name, e)
            await self.release(run_id, p.name, f"wake failed: {e}; it is stopped and started cold")
            return None
        except asyncio.CancelledError:
            # Cancelled midway, the engine is neither asleep nor proven: no longer parked (a teardown would
            # spare it), so the switch's cleanup stops it like an engine it started.
            log.warning(
                "run %d: wake of %s cancelled: no longer parked; the cleanup stops it", run_id, p.name
            )
            await self._forget(p.name)
            self.forecast.gone(info.main_pid)
            raise
        await self._forget(p.name)
        how = said(seconds, entry.way, wake=True) if entry.way else f"in {seconds:.1f}s"
        await events.phase(Phase.WAKING, f"{p.name} woke {how} and serves")
        return seconds

    # -- stopping a parked engine ------------------------------------------------------------------------

    async def make_room(self, run_id: int, target: Profile) -> None:
        """Stop each parked engine that `target` cannot start beside (its port, its GPU memory)."""
        for entry in list(self._parked.values()):
            info = entry.info
            if info.profile == target.name:
                continue
            why = guards.port_problem(target, entry.profile)
            try:
                if why is None:
                    await self._fits(target, {})
            except NotParked as e:
                why = str(e)
            if why:
                await self.release(run_id, info.profile, f"{target.name} cannot start beside it: {why}")

    async def release(self, run_id: int | None, name: str, why: str) -> bool:
        """Stop a parked engine (its host RAM and GPU residual freed); False when none was parked."""
        info = await self._forget(name)
        if info is None:
            return False
        self.forecast.gone(info.main_pid)
        log.warning("%sstopping parked %s: %s", f"run {run_id}: " if run_id else "", name, why)
        if run_id is not None:
            await self.recorder.event(run_id, Phase.STOP, f"stopping parked {name}: {why}")
        out = await self.systemd.stop(info.unit, within_s=self.stop_timeout_s)
        if run_id is not None:
            await self.recorder.event(
                run_id, Phase.STOP, f"stopped {info.unit}: job {out.job_result} in {out.seconds:.1f}s"
            )
        return True

    async def unpark(self, name: str) -> int:
        """The operator's unpark: a job of its own (one at a time with switches and teardowns), a run of
        kind `unpark`; returns once it has ended."""
        if self.get(name) is None:
            raise NotFound(f"profile {name!r} is not parked")
        with self.jobs.admit(JobKind.UNPARK, subject=name, label=f"unpark {name}") as slot:
            run_id = await self.recorder.create(NewRun(RunKind.UNPARK, name))
            task = slot.start(run_id, self._unpark(run_id, name))
        await asyncio.wait({task})
        return run_id

    async def _unpark(self, run_id: int, name: str) -> None:
        """The engine stops, its host RAM and GPU memory freed."""
        self.jobs.say(run_id, f"unpark run {run_id}: stopping parked {name}")
        info = self.get(name)
        freed = (
            f"{info.host_ram_bytes / GIB:.1f} GiB of host RAM and {sum(info.gpu_mib.values())} MiB "
            "of GPU memory"
            if info
            else ""
        )
        try:
            stopped = await self.release(run_id, name, "unpark requested")
        except K25Error as e:
            await self.recorder.finish(run_id, Outcome.FAILED, error=f"could not stop {name}: {e}")
            return
        detail = f"stopped parked {name}: freed {freed}" if stopped else f"{name} was not parked"
        await self.recorder.finish(run_id, Outcome.OK if stopped else Outcome.SKIPPED, detail=detail)

    async def lost(self, unit: str, how: str) -> ParkedInfo | None:
        """The serving watch saw a parked unit go down (a crash, an operator's stop): no longer parked."""
        info = self.of_unit(unit)
        if info is not None:
            await self._forget(info.profile)
            self.forecast.gone(info.main_pid)
            log.error("parked %s is gone: %s", info.profile, how)
        return info

    async def readopt(self, profiles: ProfileSet) -> set[str]:
        """After a daemon restart: each recorded parked engine whose unit still runs the same main process
        (and, where the engine can say, still sleeps) is parked again; the others are forgotten."""
        for info, sha in await asyncio.to_thread(self.store.all):
            lp = profiles.get(info.profile)
            why = await still_parked(info, lp, self.systemd, self.prober)
            if why is None and lp is not None:
                self._parked[info.profile] = _Entry(info, lp.profile, sha)
                log.info(
                    "readopted parked %s (main PID %d, since %s)", info.profile, info.main_pid, _since(info)
                )
            else:
                log.warning("parked %s not readopted: %s", info.profile, why)
                await asyncio.to_thread(self.store.remove, info.profile)
        self._publish()
        return set(self._parked)
