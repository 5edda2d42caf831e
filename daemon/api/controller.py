"""What the API calls: one method per request, over the services (inventory, switcher, store, teardown).
Routes stay thin; this is where a request becomes service calls and the answer becomes a schema."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime

from daemon.api.answers_view import known_answer_out
from daemon.api.benchmark_controller import BenchController
from daemon.api.http import sse_frame
from daemon.api.schemas import (
    AcceptedOut,
    CancelOut,
    GpuOut,
    LiveSampleOut,
    MetricRowOut,
    ProfileOut,
    ProgressOut,
    ReadyOut,
    ReloadOut,
    ResidencyOut,
    RunEventOut,
    RunMetricsOut,
    RunOut,
    StageOut,
    StatusOut,
    SwitchCostOut,
    TeardownPlanOut,
    TeardownRecordOut,
    TeardownReportOut,
    TeardownRunOut,
    UnitStateOut,
    VictimOut,
)
from daemon.api.status_view import StatusView
from daemon.core import redact
from daemon.core.errors import NotFound
from daemon.core.hoststate import HostState, HostStatus, StateHub
from daemon.core.run_types import FINAL_OUTCOMES, Phase, RunEventJson
from daemon.engines.load_stages import segments
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.serving.watch import ServingWatch
from daemon.status.exporter import K25Collector
from daemon.status.exporter import render as render_metrics
from daemon.status.inventory import Inventory, ProfileEntry
from daemon.status.sampler import HostSampler
from daemon.store.queries import RunView, Store
from daemon.switching.known_answer import KnownAnswers
from daemon.switching.maintenance import MaintenanceTeardown
from daemon.switching.parking import Parking
from daemon.switching.transaction import Switcher
from daemon.warming.service import WarmService


class Controller:
    def __init__(
        self,
        *,
        inventory: Inventory,
        sampler: HostSampler,
        switcher: Switcher,
        recorder: RunRecorder,
        maintenance: MaintenanceTeardown,
        default_profile: str,
        watch: ServingWatch,
        bench: BenchController,
        jobs: Jobs,
        warms: WarmService,
        parking: Parking,
        answers: KnownAnswers,
        collector: K25Collector,
    ) -> None:
        self.inventory = inventory
        self.sampler = sampler
        self.switcher = switcher
        self.recorder = recorder
        self.maintenance = maintenance
        self.watch = watch
        self.bench = bench
        self.jobs = jobs
        self.warms = warms
        self.parking = parking
        self.store: Store = recorder.store
        self.hub: StateHub = recorder.hub
        self.default_profile = default_profile
        self.collector = collector
        self.answers = answers
        self.status_view = StatusView(self.status, self._status_marks)
        self._frame: tuple[HostStatus, bytes] | None = None  # the newest /events frame

    async def metrics(self) -> bytes:
        return await asyncio.to_thread(render_metrics, self.collector)

    def _units(self) -> tuple[str, ...]:
        return self.inventory.units()

    async def _unit_states(self) -> dict[str, UnitStateOut]:
        states = await self.inventory.unit_states(self.watch.unit_states)
        return {name: UnitStateOut.model_validate(u, from_attributes=True) for name, u in states.items()}

    def ready(self, port: int | None) -> ReadyOut:
        """For load balancers, from memory: 200 while the host serves and is in rotation (on `port`)."""
        st = self.hub.status
        if st.state is HostState.SWITCHING:
            return ReadyOut(ready=False, reason="draining" if st.phase == Phase.DRAINING else "switching")
        if st.state is not HostState.ACTIVE:
            return ReadyOut(ready=False, reason=str(st.state))
        serving = self.watch.current()
        where = serving.profile.port if serving is not None else None
        if why := self.jobs.out_of_rotation():
            return ReadyOut(ready=False, profile=st.active_profile, port=where, reason=why)
        if port is not None and port != where:
            why = f"port {port} is not served (active: {st.active_profile} on {where})"
            return ReadyOut(ready=False, profile=st.active_profile, port=where, reason=why)
        return ReadyOut(ready=True, profile=st.active_profile, port=where)

    def _status_marks(self) -> tuple[object, ...]:
        """What GET /status shows changes only with these (compared by value: cheap, a few objects)."""
        s = self.sampler
        hub, watch, inventory = self.hub.status, self.watch.changes, self.inventory.profiles
        return (hub, s.gpus, s.gpus_at, s.gpu_error, s.strays, watch, inventory)

    async def status(self) -> StatusOut:
        st = self.hub.status
        run = await self.run(st.run_id) if st.run_id else None
        return StatusOut(
            **asdict(st),
            current_run=run,
            gpus=[GpuOut.model_validate(g) for g in self.sampler.gpus],
            gpus_sampled_at=datetime.fromtimestamp(at, UTC) if (at := self.sampler.gpus_at) else None,
            gpu_error=self.sampler.gpu_error,
            units=await self._unit_states(),
            strays=[VictimOut.model_validate(v) for v in self.sampler.strays],
            serving=self.watch.now(),
        )

    async def profiles(self) -> list[ProfileOut]:
        units = await self.inventory.unit_states(self.watch.unit_states)
        infos = self.inventory.profile_list(units, self.warms.residency())
        known = self.answers.views()
        return [
            profile_out(e).model_copy(
                update={
                    "parked": self.parking.get(e.name) is not None,
                    "known_answer": known_answer_out(e.name, v) if (v := known.get(e.name)) else None,
                }
            )
            for e in infos
        ]

    async def profile(self, name: str) -> ProfileOut:
        for p in await self.profiles():
            if p.name == name:
                return p
        raise NotFound(f"no profile {name!r}")

    async def reload(self) -> ReloadOut:
        fresh = await self.inventory.reload_profiles()
        self.watch.follow_units()
        return ReloadOut(valid=sorted(fresh.valid), invalid=[str(p) for p in fresh.invalid])

    async def activate(
        self, name: str, *, force: bool, wait: bool, drain: bool = True
    ) -> AcceptedOut | RunOut:
        run_id = await self.switcher.activate(name, force=force, drain=drain)
        if run_id is None:
            return AcceptedOut(run_id=None, detail="already active")
        if wait:
            await self.jobs.wait(run_id)
            return await self.run(run_id)
        return AcceptedOut(run_id=run_id)

    async def warm(self, name: str) -> AcceptedOut:
        return AcceptedOut(run_id=await self.warms.start(name))

    async def restore(self, *, wait: bool, drain: bool = True) -> AcceptedOut | RunOut:
        return await self.activate(self.default_profile, force=False, wait=wait, drain=drain)

    async def unpark(self, name: str) -> RunOut:
        """Stop a parked engine (a run of kind `unpark`) and answer with its run."""
        return await self.run(await self.parking.unpark(name))

    async def cancel(self, run_id: int) -> CancelOut:
        self.jobs.cancel(run_id)
        return CancelOut(run_id=run_id, cancelling=True)

    async def run(self, run_id: int) -> RunOut:
        view = await asyncio.to_thread(self.store.get_run, run_id=run_id)
        if view is None:
            raise NotFound(f"no run {run_id}")
        return run_out(view, details=True)

    async def runs(self, *, profile: str | None, parent: int | None = None, limit: int) -> list[RunOut]:
        rows = await asyncio.to_thread(self.store.list_runs, profile=profile, parent=parent, limit=limit)
        return [run_out(RunView(r, [], []), details=False) for r in rows]

    async def run_metrics(self, run_id: int) -> RunMetricsOut:
        try:
            rows = await asyncio.to_thread(self.watch.series, run_id)
        except LookupError as e:
            raise NotFound(f"no run {run_id}") from e
        return RunMetricsOut(
            run_id=run_id,
            rows=[
                MetricRowOut.model_validate(r.model_dump() | {"per_position": r.per_position_rates})
                for r in rows
            ],
            live=[LiveSampleOut.model_validate(x) for x in self.watch.live(run_id)],
        )

    async def run_events(self, run_id: int) -> AsyncIterator[RunEventJson]:
        """The run's stored events, then its live ones until it ends."""
        with self.hub.follow_run(run_id) as live:
            view = await asyncio.to_thread(self.store.get_run, run_id=run_id)
            if view is None:
                raise NotFound(f"no run {run_id}")
            last = 0
            for e in view.events:
                last = e.id or last
                yield RunEventJson(
                    id=e.id, phase=e.phase, detail=redact.text(e.detail), at=e.at.isoformat(), run_id=run_id
                )
            if view.run.outcome in FINAL_OUTCOMES:
                return
            while True:
                event = await live.get()
                if (event.get("id") or 0) <= last:
                    continue
                yield event | RunEventJson(run_id=run_id, detail=redact.text(event.get("detail") or ""))
                if event.get("final"):
                    return

    async def host_events(self) -> AsyncIterator[bytes]:
        async for status in self.hub.subscribe():
            yield self._host_frame(status)

    def _host_frame(self, status: HostStatus) -> bytes:
        """A state change as an SSE frame, rendered once and written to every open /events stream."""
        if self._frame is None or self._frame[0] is not status:
            event = status.to_dict() | {"reason": redact.optional_text(status.reason)}
            self._frame = (status, sse_frame(status.state, event))
        return self._frame[1]

    async def teardown_plan(self) -> TeardownPlanOut:
        return TeardownPlanOut.model_validate(await self.maintenance.plan())

    async def run_teardown(self) -> TeardownRunOut:
        """Maintenance teardown: only when no engine should run (the host is idle, failed or degraded)."""
        run_id, report = await self.maintenance.run()
        return TeardownRunOut(run_id=run_id, report=TeardownReportOut.model_validate(report.to_dict()))


def run_out(view: RunView, *, details: bool) -> RunOut:
    r = view.run
    stages = view.load_stages
    cost = SwitchCostOut.model_validate(r) if r.ready_down_at or r.drain_cut is not None else None
    return RunOut(
        switch_cost=cost,
        id=r.id or 0,
        kind=r.kind,
        profile=r.profile,
        from_profile=r.from_profile,
        outcome=r.outcome,
        phase=r.phase,
        started_at=r.started_at,
        ended_at=r.ended_at,
        load_seconds=r.load_seconds,
        progress=ProgressOut(percent=r.progress_percent, done=r.progress_done, total=r.progress_total),
        error=r.error,
        parent_id=r.parent_id,
        unit=r.unit,
        argv=view.argv,
        profile_sha256=r.profile_sha256,
        served_s=r.served_s,
        requests=r.requests,
        prompt_tokens=r.prompt_tokens,
        generation_tokens=r.generation_tokens,
        acceptance_length=r.acceptance_length,
        load_stages=stages,
        load_breakdown=[StageOut(stage=k, seconds=v) for k, v in segments(stages, r.load_seconds)]
        if stages
        else None,
        events=[RunEventOut.model_validate(e) for e in view.events] if details else None,
        teardowns=[
            TeardownRecordOut(id=t.id or 0, ok=t.ok, report=TeardownReportOut.model_validate(t.report_data))
            for t in view.teardowns
        ]
        if details
        else None,
    )


def profile_out(e: ProfileEntry) -> ProfileOut:
    if e.loaded is None:
        return ProfileOut(name=e.name, valid=False, file=e.file, error=e.error)
    p = e.loaded.profile
    return ProfileOut(
        name=e.name,
        valid=True,
        file=e.file,
        description=p.description,
        engine=p.engine,
        unit=p.unit,
        model=p.model,
        port=p.port,
        gpus=p.gpus,
        speculative=p.speculative,
        argv=e.argv,
        sha256=e.loaded.sha256,
        unit_state=UnitStateOut.model_validate(e.unit_state) if e.unit_state else None,
        default=e.default,
        warm=p.warm,
        residency=ResidencyOut.model_validate(e.residency) if e.residency else None,
    )
