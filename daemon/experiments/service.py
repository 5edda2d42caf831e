"""Benchmarks as runs: measure the active profile now (`start`), or run an experiment (`experiment`):
for each profile switch, benchmark N times, go on after a failed switch, then restore. One job at a time;
cancel works at any point (an experiment still restores)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from daemon.core.errors import InvalidInput, K25Error, Refused
from daemon.core.hoststate import HostState
from daemon.core.jsontypes import StoredJson
from daemon.core.profiles import ProfileSet
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.experiments import round_verdicts
from daemon.experiments.comparison_read import Judging
from daemon.experiments.record import Record, Restore, Step
from daemon.experiments.request import ExperimentRequest
from daemon.experiments.rounds import orders
from daemon.experiments.sweep.ranking import parse_metric
from daemon.experiments.sweep.service import Plan, Sweeps
from daemon.experiments.sweep.variants import Sweep
from daemon.measure.levels import Target
from daemon.measure.prompts import PromptSet
from daemon.measure.runner import BenchmarkRunner
from daemon.measure.spec import BenchmarkSpec
from daemon.runs.jobs import JobKind, Jobs, Slot
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import BenchStore
from daemon.switching.transaction import Switcher

log = logging.getLogger("k25.bench")


@dataclass(frozen=True)
class Checked:
    """A request that may start: its prompts (read once, for every benchmark) and a sweep's variants."""

    prompts: PromptSet
    sweep: Sweep | None


@dataclass(frozen=True)
class Started:
    """An experiment under way: its run, request, the profile it restores, each round's profiles in order (a
    sweep's variants after its base), a sweep's stored request and the prompts."""

    run_id: int
    req: ExperimentRequest
    back: str | None
    orders: list[list[str]]
    sweep: StoredJson | None
    prompts: PromptSet


class Experiments:
    def __init__(
        self,
        *,
        runner: BenchmarkRunner,
        judging: Judging,
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
        self.judging = judging  # the verdicts of an experiment's last event
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
        # Experiments past their steps (restoring, judging, recording the end): a cancel there would land
        # outside the code that answers one and leave the run unended (the simulation found it), so it is
        # refused with the reason
        self._ending: set[int] = set()

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
            # Read once, here: a dataset that is not there is refused before the run exists.
            prompts = await asyncio.to_thread(self.runner.prompt_set, spec)
            run_id = await self._new_benchmark_run(target, parent=target.serving_run_id)
            say = self._sayer(run_id, f"benchmark run {run_id} of {target.lp.profile.name}")
            slot.start(run_id, self.runner.run(run_id, spec, target, prompts, say=say))
            return run_id

    async def _new_benchmark_run(self, target: Target, *, parent: int | None) -> int:
        p = target.lp.profile
        new = NewRun(RunKind.BENCHMARK, p.name, None, parent, target.argv, target.profile_sha256, p.unit)
        return await self.recorder.create(new)

    def _sayer(self, run_id: int, prefix: str) -> Callable[[str], None]:
        return lambda line: self.jobs.say(run_id, f"{prefix}: {line}")

    async def experiment(self, req: ExperimentRequest) -> int:
        checked = await self.check(req)
        with self.jobs.admit(JobKind.EXPERIMENT, isolated=True, refuse_cancel=self._refusal) as slot:
            return await self._create_experiment(slot, req, checked)

    async def plan(self, req: ExperimentRequest) -> Plan:
        """A sweep's plan (its variants, switches and an estimate of the time), nothing started."""
        sweep = (await self.check(req)).sweep
        if sweep is None:
            raise InvalidInput("a plan is for a sweep: say what to vary")
        active, back = self._serving_and_back(req)
        return await self.sweeps.plan(sweep, repeats=req.repeats, active=active, back=back)

    def _serving_and_back(self, req: ExperimentRequest) -> tuple[str | None, str | None]:
        """The profile serving now (None unless active), and the one the experiment restores at the end."""
        st = self.hub.status
        active = st.active_profile if st.state is HostState.ACTIVE else None
        return active, (active or self.default_profile) if req.restore else None

    async def check(self, req: ExperimentRequest) -> Checked:
        """What an experiment is refused for before anything is switched; its prompts and a sweep's
        variants."""
        profiles = await self.profiles()
        for name in req.profiles:
            profiles.require(name)
        parse_metric(req.metric)
        prompts = await asyncio.to_thread(self.runner.prompt_set, req.benchmark)  # before any switch
        if not req.vary:
            return Checked(prompts, None)
        lp = profiles.get(req.profiles[0])
        assert lp is not None  # noqa: S101 - checked above
        return Checked(prompts, await self.sweeps.derive(lp, req.vary))

    async def _create_experiment(self, slot: Slot, req: ExperimentRequest, checked: Checked) -> int:
        sweep = checked.sweep
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
        plan = orders(names, req.rounds, seed=run_id)
        if req.rounds > 1:
            request |= {"orders": plan}
            log.info("run %d: %d rounds: %s", run_id, req.rounds, " | ".join(" ".join(o) for o in plan))
        await asyncio.to_thread(self.bench_store.create_experiment, run_id=run_id, request=request)
        started = Started(run_id, req, back, plan, request if sweep else None, checked.prompts)
        slot.start(run_id, self._experiment(started))
        return run_id

    async def _experiment(self, ex: Started) -> None:
        try:
            await self._run_steps(ex)
        finally:
            if ex.sweep is not None:
                self.sweeps.release()

    def _refusal(self, run_id: int) -> str | None:
        if run_id in self._ending:
            return f"run {run_id} has measured and is restoring and recording its end: it cannot be cancelled"
        return None

    async def _run_steps(self, ex: Started) -> None:
        try:
            await self._steps_then_end(ex)
        finally:
            self._ending.discard(ex.run_id)

    async def _steps_then_end(self, ex: Started) -> None:
        run_id, back, sweep = ex.run_id, ex.back, ex.sweep
        record = Record(orders=ex.orders)
        outcome: Outcome = Outcome.OK
        steps = [Step(name, r) for r, order in enumerate(ex.orders) for name in order]
        try:
            for i, step in enumerate(steps):
                record.steps.append(step)
                nxt = steps[i + 1].profile if i + 1 < len(steps) else None
                where = f"round {step.round + 1}/{len(ex.orders)}, " if len(ex.orders) > 1 else ""
                label = f"{step.profile} ({where}{i + 1}/{len(steps)})"
                await self._step(ex, label, step, record, nxt)
                if ex.req.until_decided and nxt is not None and steps[i + 1].round != step.round:
                    if why := await round_verdicts.decided(self.bench_store, record, step.round + 1, ex.req):
                        await self.recorder.event(run_id, Phase.MEASURING, f"stopping early: {why}")
                        log.info("run %d: stopping early: %s", run_id, why)
                        break
        except asyncio.CancelledError:
            if (task := asyncio.current_task()) is not None:
                task.uncancel()
            outcome = Outcome.CANCELLED
            await self.recorder.event(run_id, Phase.CANCELLED, "cancel requested: stopping here")
        except Exception as e:
            log.exception("run %d: experiment failed", run_id)
            outcome = Outcome.FAILED
            record.error = f"{type(e).__name__}: {e}"
        self._ending.add(run_id)  # from here to its end a cancel is refused (_refusal)
        if back is not None:
            record.restore = await self._restore(run_id, back)
        if sweep is None and len(ex.req.profiles) > 1 and any(s.measured for s in record.steps):
            record.verdicts = await self._verdicts(run_id, record, ex.req.profiles)
        await self._save(run_id, record)
        if outcome is Outcome.OK and not any(s.measured for s in record.steps):
            outcome = Outcome.FAILED
        detail, error = record.summary()
        if sweep is not None:
            result = await self.sweeps.result(run_id, sweep, parse_metric(ex.req.metric))
            if result.recommendation:
                detail += f"; best: {result.recommendation}"
                await self.recorder.event(run_id, Phase.MEASURING, f"best: {result.recommendation}")
        await self.recorder.finish(run_id, outcome, error=error, detail=detail)

    async def _verdicts(self, run_id: int, record: Record, profiles: list[str]) -> list[str]:
        lines = await round_verdicts.verdicts(self.judging, self.bench_store, run_id, record, profiles)
        for line in lines:
            log.info("run %d: %s", run_id, line)
            await self.recorder.event(run_id, Phase.MEASURING, line)
        return lines

    async def _save(self, run_id: int, record: Record) -> None:
        await asyncio.to_thread(self.bench_store.set_steps, run_id=run_id, steps=asdict(record))

    async def _step(self, ex: Started, label: str, step: Step, record: Record, nxt: str | None) -> None:
        run_id, req = ex.run_id, ex.req
        say = self._sayer(run_id, f"experiment run {run_id}: {label}")
        say("switching")
        await self.recorder.event(run_id, Phase.SWITCHING, label)
        step.error = await self._switch_to(run_id, step)
        await self._save(run_id, record)
        if step.error:
            await self.recorder.event(run_id, Phase.SWITCHING, f"{step.profile}: {step.error}; going on")
            return
        parked = {p.profile for p in self.hub.status.parked}
        if nxt is not None and nxt != step.profile and nxt not in parked:  # a parked one wakes: no read
            await self._warm_next(run_id, nxt)
        for rep in range(req.repeats):
            say(f"benchmark {rep + 1}/{req.repeats}")
            await self._measure(ex, step, rep)
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

    async def _measure(self, ex: Started, step: Step, rep: int) -> None:
        """One benchmark of the step's profile, a job of the experiment's; a cancel keeps what it measured."""
        run_id, req = ex.run_id, ex.req
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
                ex.prompts,
                experiment_run_id=run_id,
                repeat=step.round * req.repeats + rep,  # numbered through the rounds
                in_round=step.round,
                say=self._sayer(bid, f"benchmark run {bid}"),
            )
            task = slot.start(bid, inner)
        step.benchmark_run_ids.append(bid)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            await self.jobs.stop(bid)  # not before its task begins: the runner records its end
            step.outcomes.append(Outcome.CANCELLED)
            raise
        step.outcomes.append(Outcome.CANCELLED if task.cancelled() else task.result())

    async def _switch_to(self, run_id: int, step: Step | Restore) -> str | None:
        """Switch (a run linked to the experiment) and wait for it; the error text, or None when active."""
        # The switch is asked for in a task of its own: a cancel of the experiment meanwhile still learns
        # the run it started, and cancels it below as it would any switch it waits for.
        asking = asyncio.ensure_future(self.switcher.activate(step.profile, parent=run_id))
        try:
            sid = await asyncio.shield(asking)
        except asyncio.CancelledError:
            with contextlib.suppress(K25Error):
                if (started := await asking) is not None:
                    step.switch_run_id = started
                    await self._cancel_switch(started)
            raise
        except K25Error as e:
            return str(e)
        step.switch_run_id = sid
        if sid is not None:
            try:
                await self.jobs.wait(sid)
            except asyncio.CancelledError:
                await self._cancel_switch(sid)
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

    async def _cancel_switch(self, sid: int) -> None:
        """The experiment's switch cancelled, then waited for: a switch that refuses (rolling back, starting,
        ending the serving run) runs to its end."""
        with contextlib.suppress(K25Error):
            self.jobs.cancel(sid)
        await self.jobs.wait(sid)

    async def _restore(self, run_id: int, name: str) -> Restore:
        self.jobs.say(run_id, f"experiment run {run_id}: restoring {name}")
        await self.recorder.event(run_id, Phase.RESTORING, f"restoring {name}")
        restore = Restore(name)
        restore.error = await asyncio.shield(self._switch_to(run_id, restore))
        restore.ok = restore.error is None
        await self.recorder.event(run_id, Phase.RESTORING, f"{name}: {restore.error or 'active'}")
        return restore
