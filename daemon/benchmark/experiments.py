"""Benchmarks as runs: measure the active profile now (`start`), or run an experiment (`experiment`):
for each profile switch, benchmark N times, go on after a failed switch, then restore. One job at a time;
cancel works at any point (an experiment still restores)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from daemon.benchmark.runner import BenchmarkRunner, Target
from daemon.benchmark.spec import BenchmarkSpec
from daemon.core.errors import Busy, InvalidInput, K25Error, NotFound, Refused
from daemon.core.hoststate import HostState
from daemon.core.profiles import ProfileSet
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import BenchStore
from daemon.switching.transaction import Switcher

log = logging.getLogger("k25.bench")


class ExperimentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profiles: list[str] = Field(min_length=1, max_length=32, description="measured in this order")
    benchmark: BenchmarkSpec = Field(default_factory=lambda: BenchmarkSpec.model_validate({}))
    repeats: int = Field(1, ge=1, le=50, description="benchmarks per profile (their spread is the noise)")
    restore: bool = Field(True, description="bring the previous (or default) profile back at the end")


class Benchmarks:
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
    ) -> None:
        self.runner, self.jobs, self.recorder, self.switcher = runner, jobs, recorder, switcher
        self.profiles, self.bench_store, self.default_profile = profiles, bench_store, default_profile
        self.hub = recorder.hub
        self.store = recorder.store
        self.warm: Callable[[str], Awaitable[int]] | None = None  # a warm run of a profile (page cache)

    def _free(self) -> None:
        self.jobs.check_free()
        if self.switcher.busy:
            raise Busy(f"a switch is in progress (run {self.hub.status.run_id})")

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
            view = await asyncio.to_thread(self.store.get_run, run_id=st.serving_run_id)
            switch = view.run.parent_id if view else None
            origin = await asyncio.to_thread(self.store.get_run, run_id=switch) if switch else None
            if origin is not None and origin.run.argv:
                argv, sha = json.loads(origin.run.argv), origin.run.profile_sha256 or sha
        return Target(lp, st.serving_run_id, argv, sha)

    async def start(self, spec: BenchmarkSpec) -> int:
        """A benchmark of the active profile as a run of its own; returns its run id."""
        self._free()
        self.jobs.claim("benchmark")
        try:
            target = await self._target(spec.profile)
            run_id = await self._new_benchmark_run(target, parent=target.serving_run_id)
        except BaseException:
            self.jobs.release()
            raise
        say = self._sayer(run_id, f"benchmark run {run_id} of {target.lp.profile.name}")
        self.jobs.start("benchmark", run_id, self.runner.run(run_id, spec, target, say=say))
        return run_id

    async def _new_benchmark_run(self, target: Target, *, parent: int | None) -> int:
        p = target.lp.profile
        new = NewRun(RunKind.BENCHMARK, p.name, None, parent, target.argv, target.profile_sha256, p.unit)
        return await self.recorder.create(new)

    def _sayer(self, run_id: int, prefix: str) -> Callable[[str], None]:
        return lambda line: self.jobs.say(run_id, f"{prefix}: {line}")

    async def experiment(self, req: ExperimentRequest) -> int:
        if req.benchmark.profile is not None:
            raise InvalidInput(
                "an experiment's benchmark names no profile: the experiment's profiles are measured"
            )
        profiles = await self.profiles()
        for name in req.profiles:
            if profiles.get(name) is None:
                raise NotFound(f"no valid profile {name!r}")
        if len(set(req.profiles)) != len(req.profiles):
            raise InvalidInput("a profile is listed twice: use repeats")
        self._free()
        self.jobs.claim("experiment")
        st = self.hub.status
        back = (
            st.active_profile if st.state is HostState.ACTIVE and st.active_profile else self.default_profile
        )
        try:
            new = NewRun(RunKind.EXPERIMENT, None, st.active_profile)
            run_id = await self.recorder.create(new)
            request = req.model_dump() | {"restore_to": back if req.restore else None}
            await asyncio.to_thread(self.bench_store.create_experiment, run_id=run_id, request=request)
        except BaseException:
            self.jobs.release()
            raise
        self.jobs.start("experiment", run_id, self._experiment(run_id, req, back if req.restore else None))
        return run_id

    async def _experiment(self, run_id: int, req: ExperimentRequest, back: str | None) -> None:
        steps: list[dict[str, Any]] = []
        record: dict[str, Any] = {"steps": steps, "restore": None}
        outcome: Outcome = Outcome.OK
        try:
            for i, name in enumerate(req.profiles):
                step: dict[str, Any] = {"profile": name, "switch_run_id": None, "benchmark_run_ids": [],
                                        "outcomes": [], "error": None}  # fmt: skip
                steps.append(step)
                nxt = req.profiles[i + 1] if i + 1 < len(req.profiles) else None
                await self._step(run_id, f"{name} ({i + 1}/{len(req.profiles)})", req, step, record, nxt)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            outcome = Outcome.CANCELLED
            await self.recorder.event(run_id, Phase.CANCELLED, "cancel requested: stopping here")
        except Exception as e:
            log.exception("run %d: experiment failed", run_id)
            outcome = Outcome.FAILED
            record["error"] = f"{type(e).__name__}: {e}"
        if back is not None:
            record["restore"] = await self._restore(run_id, back)
        await self._save(run_id, record)
        failed = [f"{s['profile']}: {s['error']}" for s in steps if s["error"]]
        measured = [s["profile"] for s in steps if any(o == Outcome.OK for o in s["outcomes"])]
        if outcome is Outcome.OK and not measured:
            outcome = Outcome.FAILED
        restore = record["restore"] or {}
        detail = f"measured {', '.join(measured) or 'nothing'}" + (
            f"; restored {restore.get('profile')}" if restore.get("ok") else ""
        )
        error = "; ".join([*failed, *([f"restore: {restore['error']}"] if restore.get("error") else [])])
        await self.recorder.finish(run_id, outcome, error=error or record.get("error"), detail=detail)

    async def _save(self, run_id: int, record: dict[str, Any]) -> None:
        await asyncio.to_thread(self.bench_store.set_steps, run_id=run_id, steps=record)

    async def _step(
        self,
        run_id: int,
        label: str,
        req: ExperimentRequest,
        step: dict[str, Any],
        record: dict[str, Any],
        nxt: str | None,
    ) -> None:
        name = step["profile"]
        say = self._sayer(run_id, f"experiment run {run_id}: {label}")
        say("switching")
        await self.recorder.event(run_id, Phase.SWITCHING, label)
        step["error"] = await self._switch_to(run_id, name, step)
        await self._save(run_id, record)
        if step["error"]:
            await self.recorder.event(run_id, Phase.SWITCHING, f"{name}: {step['error']}; going on")
            return
        if nxt is not None and self.warm is not None:
            # The next profile's weights come into the page cache while this one is measured.
            try:
                warm_id = await self.warm(nxt)
                await self.recorder.event(run_id, Phase.WARMING, f"warming {nxt} (run {warm_id}) meanwhile")
            except K25Error as e:
                await self.recorder.event(run_id, Phase.WARMING, f"not warming {nxt}: {e}")
        for rep in range(req.repeats):
            say(f"benchmark {rep + 1}/{req.repeats}")
            target = await self._target(name)
            bid = await self._new_benchmark_run(target, parent=run_id)
            await self.recorder.event(
                run_id, Phase.MEASURING, f"{name}: benchmark run {bid} ({rep + 1}/{req.repeats})"
            )
            inner = self.runner.run(bid, req.benchmark, target, experiment_run_id=run_id, repeat=rep,
                                    say=self._sayer(bid, f"benchmark run {bid}"))  # fmt: skip
            task = self.jobs.start("benchmark", bid, inner, inner=True)
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                task.cancel()  # the benchmark ends cancelled and keeps what it measured
                await asyncio.wait({task})
                step["benchmark_run_ids"].append(bid)
                step["outcomes"].append(Outcome.CANCELLED)
                raise
            step["benchmark_run_ids"].append(bid)
            step["outcomes"].append(Outcome.CANCELLED if task.cancelled() else task.result())
            await self._save(run_id, record)

    async def _switch_to(self, run_id: int, name: str, step: dict[str, Any]) -> str | None:
        """Switch (a run linked to the experiment) and wait for it; the error text, or None when active."""
        try:
            sid = await self.switcher.activate(name, parent=run_id)
        except K25Error as e:
            return str(e)
        step["switch_run_id"] = sid
        if sid is not None:
            try:
                await self.switcher.settled()
            except asyncio.CancelledError:
                try:
                    await self.switcher.cancel(sid)
                except K25Error:
                    pass  # it is already rolling back, or over
                await self.switcher.settled()
                raise
            view = await asyncio.to_thread(self.store.get_run, run_id=sid)
            if view is None or view.run.outcome != Outcome.ACTIVE:
                why = (view.run.error or "").splitlines()[0] if view and view.run.error else ""
                return f"switch run {sid} ended {view.run.outcome if view else '?'}" + (
                    f": {why}" if why else ""
                )
        st = self.hub.status
        if st.state is not HostState.ACTIVE or st.active_profile != name:
            return f"after the switch the host is {st.state} ({st.active_profile or 'no profile'})"
        return None

    async def _restore(self, run_id: int, name: str) -> dict[str, Any]:
        self.jobs.say(run_id, f"experiment run {run_id}: restoring {name}")
        await self.recorder.event(run_id, Phase.RESTORING, f"restoring {name}")
        step: dict[str, Any] = {"profile": name, "switch_run_id": None}
        error = await asyncio.shield(self._switch_to(run_id, name, step))
        await self.recorder.event(run_id, Phase.RESTORING, f"{name}: {error or 'active'}")
        return step | {"ok": error is None, "error": error}
