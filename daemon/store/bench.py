"""Benchmarks and experiments in the runs database: provenance, per-level summaries (vLLM's keys), the
requests of each level as compressed JSON rows, and each experiment's steps."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy.orm import QueryableAttribute, defer
from sqlmodel import col, func, select
from sqlmodel.sql.expression import SelectOfScalar

from daemon.core.jsontypes import RequestRow, StoredJson, VllmSummary
from daemon.store.models import Benchmark, BenchmarkLevel, Experiment, Run
from daemon.store.queries import Store


@dataclass(frozen=True)
class LevelRow:
    concurrency: int | None
    request_rate: float | None
    summary: VllmSummary
    requests: list[RequestRow]


@dataclass(frozen=True)
class BenchmarkView:
    """A benchmark with its run and levels; the JSON columns decoded."""

    bench: Benchmark
    run: Run
    levels: list[BenchmarkLevel]

    @property
    def spec(self) -> StoredJson:
        return _object(self.bench.spec)

    @property
    def provenance(self) -> StoredJson:
        return _object(self.bench.provenance)

    @property
    def summaries(self) -> list[VllmSummary]:
        return [_object(lv.summary) for lv in self.levels]


@dataclass(frozen=True)
class ExperimentView:
    """An experiment's request and its steps record (what the experiment stored), decoded."""

    run: Run
    request: StoredJson
    record: StoredJson


def _object(text: str | None) -> StoredJson:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


def pack(rows: list[RequestRow]) -> bytes:
    return zlib.compress(json.dumps(rows, separators=(",", ":")).encode(), 6)


def unpack(blob: bytes) -> list[RequestRow]:
    rows: list[RequestRow] = json.loads(zlib.decompress(blob))
    return rows


class BenchStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._throughput: dict[str, float] | None = None  # newest_throughput's answer until the next save
        self.changes = 0  # a reader's cache of benchmark figures holds until this changes

    def save(self, bench: Benchmark, levels: list[LevelRow]) -> int:
        """The benchmark and all its levels in one transaction."""
        with self.store.session() as s:
            s.add(bench)
            s.flush()
            for i, lv in enumerate(levels):
                s.add(
                    BenchmarkLevel(
                        benchmark_id=bench.id or 0,
                        position=i,
                        concurrency=lv.concurrency,
                        request_rate=lv.request_rate,
                        summary=json.dumps(lv.summary),
                        requests=pack(lv.requests),
                    )
                )
            s.commit()
            self.changed()
            return bench.id or 0

    def changed(self) -> None:
        """Readers' caches are stale: a benchmark was saved, or its run ended (what it ended with decides
        whether it counts: the runner saves before the end, so that whoever waits for the end finds it)."""
        self._throughput = None
        self.changes += 1

    def get(self, *, run_id: int, requests: bool = False) -> BenchmarkView | None:
        """One benchmark; its levels' request rows are read only when asked for."""
        with self.store.session() as s:
            bench = s.exec(select(Benchmark).where(Benchmark.run_id == run_id)).first()
            run = s.get(Run, run_id)
            if bench is None or run is None:
                return None
            levels = s.exec(_levels(requests=requests).where(BenchmarkLevel.benchmark_id == bench.id)).all()
            return BenchmarkView(bench, run, list(levels))

    def recent(
        self, *, profile: str | None = None, limit: int = 50, experiment: int | None = None
    ) -> list[BenchmarkView]:
        """Newest first, with their levels' summaries (not their request rows: /compare reads up to 500
        benchmarks on every page refresh); `experiment`: that experiment's only."""
        with self.store.session() as s:
            q = select(Benchmark, Run).where(Benchmark.run_id == Run.id)
            if profile:
                q = q.where(Benchmark.profile == profile)
            if experiment is not None:
                q = q.where(Benchmark.experiment_run_id == experiment)
            rows = s.exec(q.order_by(col(Benchmark.id).desc()).limit(limit)).all()
            ids = [b.id for b, _ in rows]
            levels = s.exec(_levels(requests=False).where(col(BenchmarkLevel.benchmark_id).in_(ids))).all()
            by_bench: dict[int, list[BenchmarkLevel]] = {}
            for lv in levels:
                by_bench.setdefault(lv.benchmark_id, []).append(lv)
            return [BenchmarkView(b, r, by_bench.get(b.id or 0, [])) for b, r in rows]

    def first_requests(self, run_ids: list[int]) -> dict[int, list[RequestRow]]:
        """Each benchmark run's first level's request rows (what the verdicts are judged from)."""
        with self.store.session() as s:
            q = (
                select(Benchmark.run_id, BenchmarkLevel.requests)
                .where(BenchmarkLevel.benchmark_id == Benchmark.id, BenchmarkLevel.position == 0)
                .where(col(Benchmark.run_id).in_(run_ids))
            )
            return {rid: unpack(blob) for rid, blob in s.exec(q).all() if blob}

    def newest_throughput(self) -> dict[str, float]:
        """Each profile's newest benchmark's output throughput at its first level (tok/s), for /metrics;
        read again only after a benchmark was saved."""
        if self._throughput is None:
            found: dict[str, float] = {}
            for view in self.recent(limit=200):
                first = view.summaries[0] if view.summaries else {}
                value = first.get("output_throughput")
                if view.bench.profile not in found and isinstance(value, int | float):
                    found[view.bench.profile] = float(value)
            self._throughput = found
        return dict(self._throughput)

    def earlier_throughputs(self, bench: Benchmark, n: int) -> list[float]:
        """The output throughput of up to `n` benchmarks before `bench` that measured the same (profile,
        spec, with or without other traffic) and ended ok, newest first: what the host's own normal is."""
        with self.store.session() as s:
            q = (
                select(Benchmark.output_throughput)
                .where(Benchmark.run_id == Run.id, Run.outcome == "ok")
                .where(Benchmark.profile == bench.profile, Benchmark.spec_hash == bench.spec_hash)
                .where(Benchmark.other_traffic == bench.other_traffic, col(Benchmark.id) < (bench.id or 0))
                .where(col(Benchmark.output_throughput).is_not(None))
            )
            rows = s.exec(q.order_by(col(Benchmark.id).desc()).limit(n)).all()
            return [float(v) for v in rows if v is not None]

    def newest_each(self) -> list[Benchmark]:
        """Each profile's newest benchmark that ended ok with a throughput."""
        with self.store.session() as s:
            q = (
                select(func.max(Benchmark.id))
                .where(Benchmark.run_id == Run.id, Run.outcome == "ok")
                .where(col(Benchmark.output_throughput).is_not(None))
                .group_by(Benchmark.profile)
            )
            ids = list(s.exec(q).all())
            return list(s.exec(select(Benchmark).where(col(Benchmark.id).in_(ids))).all())

    def typical_seconds(self, *, profile: str, kind: str, outcome: str) -> float | None:
        """How long the profile's newest run of `kind` that ended `outcome` took (a plan's estimate)."""
        with self.store.session() as s:
            q = select(Run).where(Run.profile == profile, Run.kind == kind, Run.outcome == outcome)
            run = s.exec(
                q.where(col(Run.ended_at).is_not(None)).order_by(col(Run.id).desc()).limit(1)
            ).first()
            if run is None or run.ended_at is None:
                return None
            return (run.ended_at - run.started_at).total_seconds()

    def create_experiment(self, *, run_id: int, request: StoredJson) -> None:
        with self.store.session() as s:
            s.add(Experiment(run_id=run_id, request=json.dumps(request)))
            s.commit()

    def set_steps(self, *, run_id: int, steps: StoredJson) -> None:
        with self.store.session() as s:
            exp = s.exec(select(Experiment).where(Experiment.run_id == run_id)).first()
            if exp is None:
                raise LookupError(f"no experiment run {run_id}")
            exp.steps = json.dumps(steps)
            s.add(exp)
            s.commit()

    def experiment(self, *, run_id: int) -> ExperimentView | None:
        with self.store.session() as s:
            exp = s.exec(select(Experiment).where(Experiment.run_id == run_id)).first()
            run = s.get(Run, run_id)
            return None if exp is None or run is None else _experiment(exp, run)

    def experiments(self, *, limit: int = 50) -> list[ExperimentView]:
        with self.store.session() as s:
            q = select(Experiment, Run).where(Experiment.run_id == Run.id)
            rows = s.exec(q.order_by(col(Experiment.id).desc()).limit(limit)).all()
            return [_experiment(e, r) for e, r in rows]


def _experiment(e: Experiment, r: Run) -> ExperimentView:
    return ExperimentView(r, _object(e.request), _object(e.steps))


def _levels(*, requests: bool) -> SelectOfScalar[BenchmarkLevel]:
    """Levels in order; the compressed request rows (the bulk of a level) deferred unless wanted."""
    q = select(BenchmarkLevel).order_by(col(BenchmarkLevel.position))
    # SQLModel types the column as bytes; at class level it is SQLAlchemy's attribute, which defer takes.
    blob = cast("QueryableAttribute[Any]", BenchmarkLevel.requests)
    return q if requests else q.options(defer(blob))
