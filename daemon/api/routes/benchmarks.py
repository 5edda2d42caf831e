"""Benchmarks of the active profile, experiments over several, and the comparison between profiles."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query, Response

from daemon.api.bench_schemas import (
    BenchmarkOut,
    CompareOut,
    ExperimentOut,
    PlanOut,
    PromoteIn,
    PromoteOut,
    ScheduleCancelOut,
    ScheduleOut,
    SweepOut,
    SwitchPlanIn,
    SwitchPlanOut,
)
from daemon.api.routes.common import ACCEPTED, BenchCtl, Limit, ProfilesCtl, RunId, located, reads, writes
from daemon.api.schemas import AcceptedOut
from daemon.core.jsontypes import VllmSummary
from daemon.experiments.request import ExperimentRequest, PlanRequest
from daemon.experiments.sweep.ranking import METRIC_PATTERN
from daemon.measure.interchange import ImportIn
from daemon.measure.spec import BenchmarkSpec

read = reads("benchmarks")
ScheduleId = Annotated[int, Path(ge=1, le=2**31, description="a schedule's id")]
write = writes("benchmarks")


@write.post("/benchmarks", status_code=202, responses=ACCEPTED)
async def start_benchmark(
    spec: BenchmarkSpec, c: BenchCtl, response: Response, isolate: bool = False
) -> AcceptedOut:
    """`isolate=true`: /ready is 503 while it runs (the host leaves the balancer's rotation)."""
    return located(await c.start(spec, isolate=isolate), response, "/benchmarks")


@write.post("/benchmark-imports", status_code=201)
async def import_benchmark(req: ImportIn, c: BenchCtl, response: Response) -> AcceptedOut:
    """A `vllm bench serve --save-result` file (one level, or a list: k25-ctl's export) stored as a
    benchmark run of `profile`, labelled as imported; 422 names a field the file lacks."""
    return located(await c.import_results(req), response, "/benchmarks")


@read.get("/benchmarks", response_model=list[BenchmarkOut])
async def benchmarks(c: BenchCtl, profile: str | None = None, limit: Limit = 50) -> Response:
    """Newest first, with their levels' summaries (not their requests: GET /benchmarks/ID?requests=true)."""
    return Response(await c.benchmarks(profile=profile, limit=limit), media_type="application/json")


@read.get("/benchmarks/{run_id}")
async def benchmark(run_id: RunId, c: BenchCtl, requests: bool = False) -> BenchmarkOut:
    return await c.benchmark(run_id, requests=requests)


@read.get("/benchmarks/{run_id}/export")
async def export_benchmark(run_id: RunId, c: BenchCtl) -> list[VllmSummary]:
    """The levels as `vllm bench serve --save-result` JSON objects (for existing plotting scripts)."""
    return await c.export(run_id)


@write.post("/experiments", status_code=202, responses=ACCEPTED)
async def start_experiment(
    req: ExperimentRequest,
    c: BenchCtl,
    response: Response,
    at: Annotated[
        str | None, Query(max_length=200, description="OnCalendar= or +10min: a systemd timer")
    ] = None,
    max_running: Annotated[
        int | None, Query(ge=0, le=1_000_000, description="with at: skip if it serves more")
    ] = None,
) -> AcceptedOut | ScheduleOut:
    """Now (its run), or `at` a time of low traffic: a transient systemd timer (its schedule)."""
    if at is None:
        return located(await c.start_experiment(req), response, "/experiments")
    out = await c.schedule_experiment(req, at, max_running)
    response.headers["Location"] = f"/schedules/{out.id}"
    return out


@write.post("/plans")
async def plan(
    req: SwitchPlanIn | PlanRequest, c: BenchCtl, profiles: ProfilesCtl
) -> SwitchPlanOut | PlanOut:
    """Nothing is started (the write token, as what it plans). `{"activate": NAME}`: what that activate
    would do now (Ansible's check mode): switch or not, drain, park or stop, wake or cold start, what would
    refuse it. A sweep (`vary`): its variants in order, the switches, an estimate of the time from the
    base's recorded switch and benchmark (`k25-ctl experiment --dry-run`)."""
    if isinstance(req, SwitchPlanIn):
        return await profiles.plan_switch(req)
    return await c.plan(req)


@read.get("/experiments/{run_id}/sweep")
async def sweep(
    run_id: RunId,
    c: BenchCtl,
    metric: Annotated[
        str | None, Query(pattern=METRIC_PATTERN, description="throughput, tpot_p50, ttft_p99, NAME@C")
    ] = None,
) -> SweepOut:
    """The experiment's profiles (a sweep's variants with their values) ranked by the metric, the best
    with its noise band, and the acceptance length predicted from the base's per-position rates."""
    return await c.sweep(run_id, metric)


@write.post("/experiments/{run_id}/promote", status_code=201)
async def promote(run_id: RunId, req: PromoteIn, c: BenchCtl) -> PromoteOut:
    """A variant written as a new profile file (never over an existing one): review it, then activate."""
    return await c.promote(run_id, req)


@read.get("/schedules")
async def schedules(c: BenchCtl) -> list[ScheduleOut]:
    return await c.list_schedules()


@write.delete("/schedules/{schedule_id}")
async def cancel_schedule(schedule_id: ScheduleId, c: BenchCtl) -> ScheduleCancelOut:
    """Its timer stopped (systemd drops a stopped transient unit) and its request removed."""
    await c.cancel_schedule(schedule_id)
    return ScheduleCancelOut(id=schedule_id)


@write.post("/schedules/{schedule_id}/fire", status_code=202)
async def fire_schedule(schedule_id: ScheduleId, c: BenchCtl) -> AcceptedOut:
    """What the schedule's timer runs: the experiment's run, or a `skipped` run saying why not."""
    return await c.fire_schedule(schedule_id)


@read.get("/experiments", response_model=list[ExperimentOut])
async def experiments(c: BenchCtl, limit: Limit = 50) -> Response:
    """Newest first, each with its steps, rounds' orders and verdicts (its figures: GET /experiments/ID)."""
    return Response(await c.experiments(limit=limit), media_type="application/json")


@read.get("/experiments/{run_id}")
async def experiment(run_id: RunId, c: BenchCtl) -> ExperimentOut:
    return await c.experiment(run_id)


@read.get("/compare")
async def compare(
    c: BenchCtl,
    baseline: Annotated[str, Query(max_length=200)] = "baseline",
    benchmark_spec: Annotated[str | None, Query(max_length=64, description="a spec hash")] = None,
) -> CompareOut:
    return await c.compare(baseline=baseline, spec_hash=benchmark_spec)
