"""Benchmarks as runs: measure the active profile now (`start`), or run an experiment (`experiment`):
for each profile switch, benchmark N times, go on after a failed switch, then restore. One job at a time;
cancel works at any point (an experiment still restores)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

from daemon.benchmark.experiment_request import ExperimentRequest
from daemon.benchmark.measurement import Target
from daemon.benchmark.runner import BenchmarkRunner
from daemon.benchmark.spec import BenchmarkSpec
from daemon.benchmark.sweep.ranking import parse_metric
from daemon.benchmark.sweep.service import Plan, Sweeps
from daemon.benchmark.sweep.variants import Sweep
from daemon.core.errors import InvalidInput, K25Error, NotFound, Refused
from daemon.core.hoststate import HostState
from daemon.core.jsontypes import StoredJson
from daemon.core.profiles import ProfileSet
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.runs.jobs import JobKind, Jobs, Slot
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import BenchStore
from daemon.switching.transaction import Switcher

log = logging.getLogger("k25.bench")


@dataclass
class Step:
    """One profile of an experiment: its switch, its benchmarks and how each ended."""

    profile: str
    switch_run_id: int | None = None
    benchmark_run_ids: list[int] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None

    @property
    def measured(self) -> bool:
        return Outcome.OK in self.outcomes


@dataclass
class Restore:
    profile: str
    switch_run_id: int | None = None
    ok: bool = False
    error: str | None = None


@dataclass
class Record:
    """What an experiment stores as it goes (the `steps` column: JSON of this dataclass)."""

    steps: list[Step] = field(default_factory=list)
    restore: Restore | None = None
    error: str | None = None

    def summary(self) -> tuple[str, str | None]:
        """The final event's detail and the run's error."""
        failed = [f"{s.profile}: {s.error}" for s in self.steps if s.error]
        measured = [s.profile for s in self.steps if s.measured]
        r = self.restore
        detail = f"measured {', '.join(measured) or 'nothing'}" + (
            f"; restored {r.profile}" if r and r.ok else ""
        )
        restore_error = [f"restore: {r.error}"] if r and r.error else []
        return detail, "; ".join([*failed, *restore_error]) or self.error


@dataclass(frozen=True)
class Started:
    """An experiment under way: its run, request, the profile it restores, the profiles it measures in
    order (a sweep's variants after its base) and a sweep's stored request."""

    run_id: int
    req: ExperimentRequest
    back: str | None
    names: list[str]
    sweep: StoredJson | None


class Experiments:
    def __init__(
        self,
        *,
        runner: BenchmarkRunner,
        jobs: Jobs,
        recorder: RunRecorder,
        switcher: Switcher,
        profiles: Callable[[], Awaitable[ProfileSet]],
        bench_store: BenchStore,
        default_profile: str,
        sweeps: Sweeps,
        warm: Callable[[str], Awaitable[int]] | None = None,
    ) -> None:
        self.runner = runner
        self.jobs = jobs
        self.recorder = recorder
        self.switcher = switcher
        self.profiles = profiles
        self.bench_store = bench_store
        self.default_profile = default_profile
        self.hub = recorder.hub
        self.store = recorder.store
        self.warm = warm  # a warm run of a profile (page cache)
        self.sweeps = sweeps

    async def _target(self, name: str | None) -> Target:
        st = self.hub.status
        if st.state is not HostState.ACTIVE or st.active_profile is None:
            raise Refused(f"the host is {st.state}, no profile serves: activate one, or run an experiment")
        if name is not None and name != st.active_profile:
            raise Refused(
                f"profile {name!r} is not active (active: {st.active_profile}): activate it first, "
                f"or run an experiment over it"
            )
        lp = (await self.profiles()).get(st.active_profile)
        if lp is None:
            raise Refused(f"the active profile {st.active_profile!r} is no longer a valid profile file")
        argv, sha = None, lp.sha256
        if st.serving_run_id:
            origin = await asyncio.to_thread(self.store.switch_of, st.serving_run_id)
            if origin is not None and origin.argv:
                argv, sha = origin.argv, origin.run.profile_sha256 or sha
        return Target(lp, st.serving_run_id, argv, sha)

    async def start(self, spec: BenchmarkSpec, *, isolate: bool = False) -> int:
        """A benchmark of the active profile as a run of its own; returns its run id. `isolate`: the host is
        out of the balancer's rotation meanwhile (production traffic would count in its figures)."""
        with self.jobs.admit(JobKind.BENCHMARK, isolated=isolate) as slot:
            target = await self._target(spec.profile)
            await asyncio.to_thread(self.runner.prompt_set, spec)  # a dataset that is not there: refused
            run_id = await self._new_benchmark_run(target, parent=target.serving_run_id)
            say = self._sayer(run_id, f"benchmark run {run_id} of {target.lp.profile.name}")
            slot.start(run_id, self.runner.run(run_id, spec, target, say=say))
            return run_id

    async def _new_benchmark_run(self, target: Target, *, parent: int | None) -> int:
        p = target.lp.profile
        new = NewRun(RunKind.BENCHMARK, p.name, None, parent, target.argv, target.profile_sha256, p.unit)
        return await self.recorder.create(new)

    def _sayer(self, run_id: int, prefix: str) -> Callable[[str], None]:
        return lambda line: self.jobs.say(run_id, f"{prefix}: {line}")

    async def experiment(self, req: ExperimentRequest) -> int:
        sweep = await self.check(req)
        with self.jobs.admit(JobKind.EXPERIMENT, isolated=True) as slot:  # out of rotation while it runs
            return await self._create_experiment(slot, req, sweep)

    async def plan(self, req: ExperimentRequest) -> Plan:
        """A sweep's plan (its variants, switches and an estimate of the time), nothing started."""
        sweep = await self.check(req)
        if sweep is None:
            raise InvalidInput("a plan is for a sweep: say what to vary")
        active, back = self._serving_and_back(req)
        return await self.sweeps.plan(sweep, repeats=req.repeats, active=active, back=back)

    def _serving_and_back(self, req: ExperimentRequest) -> tuple[str | None, str | None]:
        """The profile serving now (None unless active), and the one the experiment restores at the end."""
        st = self.hub.status
        active = st.active_profile if st.state is HostState.ACTIVE else None
        return active, (active or self.default_profile) if req.restore else None

    async def check(self, req: ExperimentRequest) -> Sweep | None:
        """What an experiment is refused for before anything is switched; a sweep's variants."""
        profiles = await self.profiles()
        for name in req.profiles:
            if profiles.get(name) is None:
                raise NotFound(f"no valid profile {name!r}")
        parse_metric(req.metric)
        await asyncio.to_thread(self.runner.prompt_set, req.benchmark)  # before anything is switched
        if not req.vary:
            return None
        lp = profiles.get(req.profiles[0])
        assert lp is not None  # noqa: S101 - checked above
        return await self.sweeps.derive(lp, req.vary)

    async def _create_experiment(self, slot: Slot, req: ExperimentRequest, sweep: Sweep | None) -> int:
        _, back = self._serving_and_back(req)
        run_id = await self.recorder.create(NewRun(RunKind.EXPERIMENT, None, self.hub.status.active_profile))
        request = req.model_dump() | {"restore_to": back}
        names = list(req.profiles)
        if sweep is not None:
            request |= self.sweeps.request_fields(sweep)
            names += [v.name for v in sweep.variants]
            self.sweeps.hold(sweep)
            log.info(
                "run %d: sweep of %s over %s: %d variants",
                run_id,
                req.profiles[0],
                ", ".join(a.key for a in sweep.axes),
                len(sweep.variants),
            )
        await asyncio.to_thread(self.bench_store.create_experiment, run_id=run_id, request=request)
        slot.start(run_id, self._experiment(Started(run_id, req, back, names, request if sweep else None)))
        return run_id

    async def _experiment(self, ex: Started) -> None:
        try:
            await self._run_steps(ex)
        finally:
            if ex.sweep is not None:
                self.sweeps.release()

    async def _run_steps(self, ex: Started) -> None:
        run_id, req, back, names, sweep = ex.run_id, ex.req, ex.back, ex.names, ex.sweep
        record = Record()
        outcome: Outcome = Outcome.OK
        try:
            for i, name in enumerate(names):
                step = Step(name)
                record.steps.append(step)
                nxt = names[i + 1] if i + 1 < len(names) else None
                await self._step(run_id, f"{name} ({i + 1}/{len(names)})", req, step, record, nxt)
        except asyncio.CancelledError:
            if (task := asyncio.current_task()) is not None:
                task.uncancel()
            outcome = Outcome.CANCELLED
            await self.recorder.event(run_id, Phase.CANCELLED, "cancel requested: stopping here")
        except Exception as e:
            log.exception("run %d: experiment failed", run_id)
            outcome = Outcome.FAILED
            record.error = f"{type(e).__name__}: {e}"
        if back is not None:
            record.restore = await self._restore(run_id, back)
        await self._save(run_id, record)
        if outcome is Outcome.OK and not any(s.measured for s in record.steps):
            outcome = Outcome.FAILED
        detail, error = record.summary()
        if sweep is not None:
            result = await self.sweeps.result(run_id, sweep, parse_metric(req.metric))
            if result.recommendation:
                detail += f"; best: {result.recommendation}"
                await self.recorder.event(run_id, Phase.MEASURING, f"best: {result.recommendation}")
        await self.recorder.finish(run_id, outcome, error=error, detail=detail)

    async def _save(self, run_id: int, record: Record) -> None:
        await asyncio.to_thread(self.bench_store.set_steps, run_id=run_id, steps=asdict(record))

    async def _step(
        self, run_id: int, label: str, req: ExperimentRequest, step: Step, record: Record, nxt: str | None
    ) -> None:
        say = self._sayer(run_id, f"experiment run {run_id}: {label}")
        say("switching")
        await self.recorder.event(run_id, Phase.SWITCHING, label)
        step.error = await self._switch_to(run_id, step)
        await self._save(run_id, record)
        if step.error:
            await self.recorder.event(run_id, Phase.SWITCHING, f"{step.profile}: {step.error}; going on")
            return
        if nxt is not None:
            await self._warm_next(run_id, nxt)
        for rep in range(req.repeats):
            say(f"benchmark {rep + 1}/{req.repeats}")
            await self._measure(run_id, req, step, rep)
            await self._save(run_id, record)

    async def _warm_next(self, run_id: int, nxt: str) -> None:
        """The next profile's weights come into the page cache while this one is measured."""
        if self.warm is None:
            return
        try:
            warm_id = await self.warm(nxt)
            await self.recorder.event(run_id, Phase.WARMING, f"warming {nxt} (run {warm_id}) meanwhile")
        except K25Error as e:
            await self.recorder.event(run_id, Phase.WARMING, f"not warming {nxt}: {e}")

    async def _measure(self, run_id: int, req: ExperimentRequest, step: Step, rep: int) -> None:
        """One benchmark of the step's profile, a job of the experiment's; a cancel keeps what it measured."""
        with self.jobs.admit(JobKind.BENCHMARK, parent=run_id) as slot:
            target = await self._target(step.profile)
            bid = await self._new_benchmark_run(target, parent=run_id)
            await self.recorder.event(
                run_id, Phase.MEASURING, f"{step.profile}: benchmark run {bid} ({rep + 1}/{req.repeats})"
            )
            inner = self.runner.run(
                bid,
                req.benchmark,
                target,
                experiment_run_id=run_id,
                repeat=rep,
                say=self._sayer(bid, f"benchmark run {bid}"),
            )
            task = slot.start(bid, inner)
        step.benchmark_run_ids.append(bid)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()
            await asyncio.wait({task})
            step.outcomes.append(Outcome.CANCELLED)
            raise
        step.outcomes.append(Outcome.CANCELLED if task.cancelled() else task.result())

    async def _switch_to(self, run_id: int, step: Step | Restore) -> str | None:
        """Switch (a run linked to the experiment) and wait for it; the error text, or None when active."""
        try:
            sid = await self.switcher.activate(step.profile, parent=run_id)
        except K25Error as e:
            return str(e)
        step.switch_run_id = sid
        if sid is not None:
            try:
                await self.jobs.wait(sid)
            except asyncio.CancelledError:
                with contextlib.suppress(K25Error):  # it is already rolling back, or over
                    self.jobs.cancel(sid)
                await self.jobs.wait(sid)
                raise
            view = await asyncio.to_thread(self.store.get_run, run_id=sid)
            if view is None or view.run.outcome != Outcome.ACTIVE:
                why = (view.run.error or "").splitlines()[0] if view and view.run.error else ""
                ended = view.run.outcome if view else "?"
                return f"switch run {sid} ended {ended}" + (f": {why}" if why else "")
        st = self.hub.status
        if st.state is not HostState.ACTIVE or st.active_profile != step.profile:
            return f"after the switch the host is {st.state} ({st.active_profile or 'no profile'})"
        return None

    async def _restore(self, run_id: int, name: str) -> Restore:
        self.jobs.say(run_id, f"experiment run {run_id}: restoring {name}")
        await self.recorder.event(run_id, Phase.RESTORING, f"restoring {name}")
        restore = Restore(name)
        restore.error = await asyncio.shield(self._switch_to(run_id, restore))
        restore.ok = restore.error is None
        await self.recorder.event(run_id, Phase.RESTORING, f"{name}: {restore.error or 'active'}")
        return restore
