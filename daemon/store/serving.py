"""A serving run's metric rows: one per period (a minute) while it serves, its totals kept on the run,
old minute rows compacted into hourly ones and the oldest deleted; old runs pruned (bounded retention)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from itertools import groupby

from sqlmodel import col, delete, select, update

from daemon.core.run_types import Outcome, RunKind
from daemon.store.models import Run, RunEvent, ServingMetric, TeardownRecord
from daemon.store.queries import Store, require_run

KEPT_KINDS = (RunKind.BENCHMARK, RunKind.EXPERIMENT)


def weighted(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    """Mean of values weighted by generated tokens (acceptance over a longer span)."""
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


class ServingStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add_row(self, row: ServingMetric) -> None:
        """The row, and the run's totals updated with it, in one transaction."""
        with self.store.session() as s:
            run = require_run(s, row.run_id)
            before = run.generation_tokens or 0.0
            run.acceptance_length = weighted(
                [(run.acceptance_length, before), (row.acceptance_length, row.generation_tokens)]
            )
            run.served_s = (run.served_s or 0.0) + row.seconds
            run.requests = (run.requests or 0.0) + row.requests
            run.prompt_tokens = (run.prompt_tokens or 0.0) + row.prompt_tokens
            run.generation_tokens = before + row.generation_tokens
            s.add_all([row, run])
            s.commit()

    def set_served(self, run_id: int, seconds: float) -> None:
        with self.store.session() as s:
            run = require_run(s, run_id)
            run.served_s = seconds
            s.add(run)
            s.commit()

    def series(self, run_id: int) -> list[ServingMetric]:
        with self.store.session() as s:
            require_run(s, run_id)
            q = select(ServingMetric).where(ServingMetric.run_id == run_id).order_by(col(ServingMetric.at))
            return list(s.exec(q).all())

    def generated(self, *, since: datetime, until: datetime) -> tuple[float, float]:
        """(requests, generation tokens) of the metric rows that overlap the span (a row covers `seconds`
        from `at`; an hourly row at most an hour): their ratio is the mean output length served then."""
        cols = (
            col(ServingMetric.at),
            col(ServingMetric.seconds),
            col(ServingMetric.requests),
            col(ServingMetric.generation_tokens),
        )
        with self.store.session() as s:
            q = select(*cols).where(cols[0] <= until, cols[0] >= since - timedelta(hours=1))
            rows = s.exec(q).all()
        over = [r for r in rows if _aware(r[0]) + timedelta(seconds=r[1]) >= since]
        return sum(r[2] for r in over), sum(r[3] for r in over)

    def compact(self, *, minutes_before: datetime, hours_before: datetime) -> tuple[int, int]:
        """Minute rows older than `minutes_before` become one row per run and hour; hour rows older than
        `hours_before` go. Returns (minute rows compacted, hour rows deleted)."""
        with self.store.session() as s:
            old = s.exec(
                select(ServingMetric)
                .where(ServingMetric.resolution == "minute", col(ServingMetric.at) < minutes_before)
                .order_by(col(ServingMetric.run_id), col(ServingMetric.at))
            ).all()
            for (run_id, hour), group in groupby(
                old, key=lambda r: (r.run_id, r.at.replace(minute=0, second=0))
            ):
                rows = list(group)
                seconds = sum(r.seconds for r in rows)
                gen = sum(r.generation_tokens for r in rows)
                s.add(
                    ServingMetric(
                        run_id=run_id,
                        at=hour,
                        resolution="hour",
                        seconds=seconds,
                        requests=sum(r.requests for r in rows),
                        prompt_tokens=sum(r.prompt_tokens for r in rows),
                        generation_tokens=gen,
                        tokens_per_s=gen / seconds if seconds else 0.0,
                        running=rows[-1].running,
                        waiting=rows[-1].waiting,
                        kv_usage=rows[-1].kv_usage,
                        acceptance_rate=weighted([(r.acceptance_rate, r.generation_tokens) for r in rows]),
                        acceptance_length=weighted(
                            [(r.acceptance_length, r.generation_tokens) for r in rows]
                        ),
                    )
                )
                for r in rows:
                    s.delete(r)
            gone = s.exec(
                delete(ServingMetric).where(
                    col(ServingMetric.resolution) == "hour", col(ServingMetric.at) < hours_before
                )
            )
            s.commit()
            return len(old), int(gone.rowcount or 0)

    def prune_runs(self, *, before: datetime) -> int:
        """Finished runs that ended before `before` go, with their events, teardowns and metric rows (run
        retention); a newer run that pointed at one of them keeps its own record."""
        with self.store.session() as s:
            old = select(Run.id).where(
                Run.outcome != Outcome.RUNNING,
                col(Run.ended_at) < before,
                col(Run.kind).not_in(KEPT_KINDS),  # measured results are the host's memory: never pruned
            )
            ids = [i for i in s.exec(old).all() if i is not None]
            if ids:
                s.exec(update(Run).where(col(Run.parent_id).in_(ids)).values(parent_id=None))
                for table in (RunEvent, TeardownRecord, ServingMetric):
                    s.exec(delete(table).where(col(table.run_id).in_(ids)))
                s.exec(delete(Run).where(col(Run.id).in_(ids)))
                s.commit()
                self.store.forget_summary()
            return len(ids)

    def run(self, run_id: int) -> Run:
        with self.store.session() as s:
            return require_run(s, run_id)


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)
