"""What the run routes call: one run with its events and teardowns, the list, a serving run's metric rows
and live samples, a run's event stream, and a cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from daemon.api.schemas import (
    CancelOut,
    LiveSampleOut,
    MetricRowOut,
    ProgressOut,
    RunEventOut,
    RunMetricsOut,
    RunOut,
    StageOut,
    SwitchCostOut,
)
from daemon.api.teardown_schemas import TeardownRecordOut, TeardownReportOut
from daemon.core import redact
from daemon.core.errors import NotFound, WrongState
from daemon.core.hoststate import StateHub
from daemon.core.run_types import FINAL_OUTCOMES, RunEventJson
from daemon.engines.load_stages import segments
from daemon.runs.jobs import Jobs
from daemon.serving.watch import ServingWatch
from daemon.store.queries import RunView, Store


class RunsController:
    def __init__(self, *, store: Store, hub: StateHub, jobs: Jobs, watch: ServingWatch) -> None:
        self.store = store
        self.hub = hub
        self.jobs = jobs
        self.watch = watch

    async def cancel(self, run_id: int) -> CancelOut:
        try:
            self.jobs.cancel(run_id)
        except WrongState:  # not a job: a run that ended (409), or none at all (404, as GET /runs/ID says)
            if await asyncio.to_thread(self.store.get_run, run_id=run_id) is None:
                raise NotFound(f"no run {run_id}") from None
            raise
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
                stored = RunEventJson(
                    id=e.id, phase=e.phase, detail=redact.text(e.detail), at=e.at.isoformat(), run_id=run_id
                )
                if e.progress_percent is not None:  # as the live event had it
                    stored["progress_percent"] = e.progress_percent
                    stored["progress_done"] = e.progress_done or 0
                    stored["progress_total"] = e.progress_total or 0
                yield stored
            if view.run.outcome in FINAL_OUTCOMES:
                return
            while True:
                event = await live.get()
                if (event.get("id") or 0) <= last:
                    continue
                yield event | RunEventJson(run_id=run_id, detail=redact.text(event.get("detail") or ""))
                if event.get("final"):
                    return


def run_out(view: RunView, *, details: bool) -> RunOut:
    """The run's own columns by name (RunOut's fields are named for them), and what is derived."""
    r = view.run
    stages = view.load_stages
    derived = {
        "id": r.id or 0,
        "switch_cost": SwitchCostOut.model_validate(r)
        if r.ready_down_at or r.drain_cut is not None
        else None,
        "progress": ProgressOut(percent=r.progress_percent, done=r.progress_done, total=r.progress_total),
        "argv": view.argv,
        "load_stages": stages,
        "load_breakdown": [StageOut(stage=k, seconds=v) for k, v in segments(stages, r.load_seconds)]
        if stages
        else None,
        "events": [RunEventOut.model_validate(e) for e in view.events] if details else None,
        "teardowns": [
            TeardownRecordOut(id=t.id or 0, ok=t.ok, report=TeardownReportOut.model_validate(t.report_data))
            for t in view.teardowns
        ]
        if details
        else None,
    }
    return RunOut.model_validate(r.model_dump() | derived)
