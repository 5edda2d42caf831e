"""What each switch cost the clients, on its run: when the host went out of rotation (`/ready` 503) and came
back, the drain (how long, what finished, what was cut). /metrics' downtime histogram and cut counter are
computed in SQL once, then kept current as switches record theirs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlmodel import col, func, select

from daemon.store.models import Run
from daemon.store.queries import Store, require_run

DOWNTIME_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0)


@dataclass
class CostSummary:
    """The downtime histogram (cumulative bucket counts, as Prometheus wants them) and the cut total."""

    buckets: list[int] = field(default_factory=lambda: [0] * len(DOWNTIME_BUCKETS))
    count: int = 0
    total_s: float = 0.0
    cut: int = 0

    def observe(self, downtime_s: float) -> None:
        for i, bound in enumerate(DOWNTIME_BUCKETS):
            if downtime_s <= bound:
                self.buckets[i] += 1
        self.count += 1
        self.total_s += downtime_s


class SwitchCostStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._summary: CostSummary | None = None
        self._lock = threading.Lock()

    def out_of_rotation(self, *, run_id: int, at: datetime) -> None:
        with self.store.session() as s:
            run = require_run(s, run_id)
            run.ready_down_at = at
            s.add(run)
            s.commit()

    def back_in_rotation(self, *, run_id: int, down_at: datetime, up_at: datetime) -> float:
        """The run brought the host back (a switch, or the rollback of one): the downtime since `down_at`."""
        downtime = max(0.0, (up_at - down_at).total_seconds())
        with self.store.session() as s:
            run = require_run(s, run_id)
            run.ready_down_at, run.ready_up_at, run.downtime_s = down_at, up_at, downtime
            s.add(run)
            s.commit()
        with self._lock:
            if self._summary is not None:
                self._summary.observe(downtime)
        return downtime

    def drained(
        self, *, run_id: int, seconds: float | None, finished: int, cut: int, timed_out: bool
    ) -> None:
        """`seconds` None: no drain (skipped by request); `cut` is what was still in flight at the stop."""
        with self.store.session() as s:
            run = require_run(s, run_id)
            run.drain_s, run.drain_finished, run.drain_cut, run.drain_timed_out = (
                seconds,
                finished,
                cut,
                timed_out,
            )
            s.add(run)
            s.commit()
        with self._lock:
            if self._summary is not None:
                self._summary.cut += cut

    def summary(self) -> CostSummary:
        with self._lock:
            if self._summary is None:
                self._summary = self._summarize()
            s = self._summary
            return CostSummary(list(s.buckets), s.count, s.total_s, s.cut)

    def _summarize(self) -> CostSummary:
        out = CostSummary()
        with self.store.session() as s:
            for downtime in s.exec(select(Run.downtime_s).where(col(Run.downtime_s).is_not(None))).all():
                out.observe(float(downtime or 0.0))
            out.cut = int(s.exec(select(func.coalesce(func.sum(Run.drain_cut), 0))).one() or 0)
        return out
