"""What the benchmark, experiment, schedule and comparison routes call: the Experiments service and the stored
results, turned into schemas."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import asdict
from datetime import datetime
from typing import TypedDict

from pydantic import TypeAdapter

from daemon.api.answers_view import agreement_out
from daemon.api.bench_schemas import (
    BenchmarkLevelOut,
    BenchmarkOut,
    CapacityOut,
    CompareOut,
    ExperimentOut,
    GateOut,
    PlanOut,
    PromoteIn,
    PromoteOut,
    ProvenanceOut,
    RelativeOut,
    RestoreOut,
    RoundOut,
    ScheduleOut,
    StepOut,
    SweepOut,
)
from daemon.api.schemas import AcceptedOut, AgreementOut
from daemon.core.errors import NotFound
from daemon.core.jsontypes import VllmSummary
from daemon.core.kept import Kept
from daemon.core.run_types import RunKind
from daemon.experiments.compare import Comparison, mean, predicted_below
from daemon.experiments.comparison_read import Judging
from daemon.experiments.request import ExperimentRequest
from daemon.experiments.service import Experiments
from daemon.experiments.sweep.ranking import parse_metric
from daemon.experiments.timers import Schedule, Schedules
from daemon.measure import capacity
from daemon.measure.interchange import ImportIn
from daemon.measure.relative import RelativeThroughput, gate_verdict
from daemon.measure.spec import BenchmarkSpec
from daemon.proving.known_answer import KnownAnswers
from daemon.store.bench import BenchmarkView, BenchStore, ExperimentView, unpack
from daemon.store.models import Run
from daemon.store.queries import Store

BENCHMARKS = TypeAdapter(list[BenchmarkOut])
EXPERIMENTS = TypeAdapter(list[ExperimentOut])
LISTS_KEPT = 16  # serialized lists kept (per filter and limit) until what they read changes


class BenchController:
    def __init__(
        self,
        *,
        experiments: Experiments,
        judging: Judging,
        schedules: Schedules,
        answers: KnownAnswers,
        bench_store: BenchStore,
        relative: RelativeThroughput,
        store: Store,
    ) -> None:
        self.svc = experiments
        self.judging = judging
        self.schedules = schedules
        self.answers = answers
        self.bench_store = bench_store
        self.relative = relative  # a benchmark against this host's own normal (the exporter's too)
        self.store = store
        self._benchmark_lists = Kept[bytes](LISTS_KEPT)  # GET /benchmarks, per BenchStore.changes
        self._experiment_lists = Kept[bytes](LISTS_KEPT)  # GET /experiments, per Store.commits

    async def import_results(self, req: ImportIn) -> AcceptedOut:
        return AcceptedOut(run_id=await self.svc.runner.import_results(req))

    async def start(self, spec: BenchmarkSpec, *, isolate: bool = False) -> AcceptedOut:
        return AcceptedOut(run_id=await self.svc.start(spec, isolate=isolate))

    async def benchmark(self, run_id: int, *, requests: bool) -> BenchmarkOut:
        view = await asyncio.to_thread(self.bench_store.get, run_id=run_id, requests=requests)
        if view is not None:
            relative = await asyncio.to_thread(self.relative.of, view.bench)
            out = bench_out(view, requests=requests)
            update: dict[str, object] = {
                "relative": RelativeOut.model_validate(relative) if relative else None
            }
            if isinstance(gate := view.spec.get("gate"), dict):
                floor, need = float(gate["min_relative"]), bool(gate.get("require_normal"))
                passed, text = gate_verdict(relative, floor, need)
                update["gate"] = GateOut(min_relative=floor, require_normal=need, passed=passed, text=text)
            return out.model_copy(update=update)
        run = await asyncio.to_thread(self.store.get_run, run_id=run_id)
        if run is None or run.run.kind != RunKind.BENCHMARK:
            raise NotFound(f"no benchmark run {run_id}")
        return BenchmarkOut(**_run_fields(run.run), profile=run.run.profile)  # still running

    async def benchmarks(self, *, profile: str | None, limit: int) -> bytes:
        """The list as JSON, serialized once per change of the benchmarks (BenchStore.changes): fifty
        benchmarks with their levels' summaries are 290 kB, 22 ms to read and serialize each time."""

        async def build() -> bytes:
            views = await asyncio.to_thread(self.bench_store.recent, profile=profile, limit=limit)
            return BENCHMARKS.dump_json([bench_out(v, requests=False) for v in views])

        return await self._benchmark_lists.get(self.bench_store.changes, (profile, limit), build)

    async def export(self, run_id: int) -> list[VllmSummary]:
        """One JSON object per level, keyed as `vllm bench serve --save-result` writes them."""
        out = await self.benchmark(run_id, requests=False)
        prov = out.provenance or ProvenanceOut()
        return [
            lv.summary
            | {
                "date": out.started_at.strftime("%Y%m%d-%H%M%S"),
                "backend": "openai-chat" if (out.spec or {}).get("endpoint") == "chat" else "openai",
                "model_id": prov.model,
                "tokenizer_id": prov.model,
                "burstiness": 1.0,
                "k25_run_id": out.run_id,
                "k25_profile": out.profile,
            }
            for lv in out.levels
        ]

    async def start_experiment(self, req: ExperimentRequest) -> AcceptedOut:
        return AcceptedOut(run_id=await self.svc.experiment(req))

    async def schedule_experiment(
        self, req: ExperimentRequest, at: str, max_running: int | None
    ) -> ScheduleOut:
        return schedule_out(await self.schedules.schedule(req, at, max_running))

    async def list_schedules(self) -> list[ScheduleOut]:
        return [schedule_out(s) for s in await self.schedules.list()]

    async def cancel_schedule(self, sid: int) -> None:
        await self.schedules.cancel(sid)

    async def fire_schedule(self, sid: int) -> AcceptedOut:
        return AcceptedOut(run_id=await self.schedules.fire(sid))

    async def experiment(self, run_id: int) -> ExperimentOut:
        found = await asyncio.to_thread(self.bench_store.experiment, run_id=run_id)
        if found is None:
            raise NotFound(f"no experiment run {run_id}")
        out = self._with_answers(experiment_out(found))
        if out.request.get("variants") or not out.steps:  # a sweep's figures: GET /experiments/ID/sweep
            return out
        views, comparison = await self.judging.judged(baseline=out.steps[0].profile, experiment=run_id)
        if not views:
            return out
        return out.model_copy(
            update={"rounds": rounds_out(out.steps, views), "comparison": _compare_out(comparison, [])}
        )

    async def experiments(self, *, limit: int) -> bytes:
        """The list as JSON, kept until the database next commits (Store.commits): fifty experiments'
        steps and runs cost 11 ms to read and build over a year's history (perf/history.py)."""

        async def build() -> bytes:
            found = await asyncio.to_thread(self.bench_store.experiments, limit=limit)
            return EXPERIMENTS.dump_json([self._with_answers(experiment_out(e)) for e in found])

        return await self._experiment_lists.get(self.store.commits, limit, build)

    def _with_answers(self, out: ExperimentOut) -> ExperimentOut:
        """How each profile it measured answers, next to the default profile's known answer."""
        agreed = self.answers.agreements(self.answers.default_profile)
        measured = dict.fromkeys(s.profile for s in out.steps)
        rows = [agreement_out(name, agreed[name]) for name in measured if name in agreed]
        return out.model_copy(update={"answers": rows})

    async def plan(self, req: ExperimentRequest) -> PlanOut:
        return PlanOut.model_validate(asdict(await self.svc.plan(req)))

    async def sweep(self, run_id: int, metric: str | None) -> SweepOut:
        found = await asyncio.to_thread(self.bench_store.experiment, run_id=run_id)
        if found is None:
            raise NotFound(f"no experiment run {run_id}")
        result = await self.svc.sweeps.result(run_id, found.request, parse_metric(metric))
        return SweepOut.model_validate(asdict(result))

    async def promote(self, run_id: int, req: PromoteIn) -> PromoteOut:
        found = await asyncio.to_thread(self.bench_store.experiment, run_id=run_id)
        if found is None:
            raise NotFound(f"no experiment run {run_id}")
        path = await self.svc.sweeps.promote(run_id, found.request, req.variant, req.name)
        return PromoteOut(name=path.stem, file=str(path))

    async def compare(self, *, baseline: str, spec_hash: str | None) -> CompareOut:
        result = await self.judging.compare(baseline=baseline, spec_hash=spec_hash)
        agreed = self.answers.agreements(baseline)
        return _compare_out(result, [agreement_out(name, a) for name, a in sorted(agreed.items())])


def _compare_out(result: Comparison, answers: list[AgreementOut]) -> CompareOut:
    return CompareOut.model_validate(asdict(result) | {"answers": answers})


def rounds_out(steps: list[StepOut], views: list[BenchmarkView]) -> list[RoundOut]:
    """Each step's benchmarks' figures (their first level), averaged over its repeats."""
    by_run = {v.bench.run_id: v.bench for v in views}
    out = []
    for step in steps:
        benches = [b for rid in step.benchmark_run_ids if (b := by_run.get(rid)) is not None]
        thr = [b.output_throughput for b in benches if b.output_throughput is not None]
        acc = [b.acceptance_length for b in benches if b.acceptance_length is not None]
        out.append(
            RoundOut(
                round=step.round,
                profile=step.profile,
                benchmark_run_ids=step.benchmark_run_ids,
                output_throughput=mean(thr),
                acceptance_length=mean(acc),
            )
        )
    return out


class RunFields(TypedDict):
    """What a benchmark's or experiment's answer takes from its run."""

    run_id: int
    outcome: str
    phase: str
    started_at: datetime
    ended_at: datetime | None
    error: str | None


def _run_fields(r: Run) -> RunFields:
    return RunFields(
        run_id=r.id or 0,
        outcome=r.outcome,
        phase=r.phase,
        started_at=r.started_at,
        ended_at=r.ended_at,
        error=r.error,
    )


def bench_out(v: BenchmarkView, *, requests: bool) -> BenchmarkOut:
    """The benchmark's own columns by name (BenchmarkOut's fields are named for them), its run's, and the
    decoded JSON and levels."""
    derived = {
        "spec": v.spec,
        "provenance": ProvenanceOut.model_validate(v.provenance),
        "levels": [
            BenchmarkLevelOut(
                concurrency=lv.concurrency,
                request_rate=lv.request_rate,
                summary=summary,
                requests=unpack(lv.requests) if requests else None,
                predicted_acceptance_length=predicted_below(summary) or None,
            )
            for lv, summary in zip(v.levels, v.summaries, strict=True)
        ],
    }
    found = capacity.of_run(v)
    if found is not None:
        derived["capacity"] = CapacityOut.model_validate(dataclasses.asdict(found) | {"text": found.text()})
    return BenchmarkOut.model_validate(v.bench.model_dump() | _run_fields(v.run) | derived)


def schedule_out(s: Schedule) -> ScheduleOut:
    return ScheduleOut.model_validate(dataclasses.asdict(s) | {"request": s.request.model_dump()})


def experiment_out(e: ExperimentView) -> ExperimentOut:
    return ExperimentOut(
        **_run_fields(e.run),
        request=e.request,
        steps=[StepOut.model_validate(s) for s in e.record.get("steps", [])],
        restore=RestoreOut.model_validate(r) if (r := e.record.get("restore")) else None,
        orders=e.record.get("orders") or [],
        verdicts=e.record.get("verdicts") or [],
    )
