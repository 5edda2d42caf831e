"""What /metrics exports from the database: aggregated in SQL once, then kept current as runs begin and end
(a scrape never reads the runs table: ~23 ms at 100k runs, even with indexes)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from sqlmodel import Session, col, func, select

from daemon.core.run_types import Outcome
from daemon.store.models import Run, TeardownRecord


@dataclass
class MetricsSummary:
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    load_seconds: dict[str, float] = field(default_factory=dict)  # each profile's last good switch
    switch_seconds: dict[str, float] = field(default_factory=dict)
    teardown_seconds: float | None = None
    teardown_ok: bool | None = None  # the newest teardown verified the GPUs clean
    # Each profile's last good load, its stages as the engine printed them.
    load_stages: dict[str, dict[str, float]] = field(default_factory=dict)

    def copy(self) -> MetricsSummary:
        return replace(
            self,
            counts=dict(self.counts),
            load_seconds=dict(self.load_seconds),
            switch_seconds=dict(self.switch_seconds),
            load_stages=dict(self.load_stages),
        )

    def count(self, kind: str, outcome: str, n: int) -> None:
        key = (kind, outcome)
        self.counts[key] = self.counts.get(key, 0) + n

    def switched(self, run: Run) -> None:
        """A switch ended active: its profile's newest good load and switch."""
        if not run.profile:
            return
        if run.load_seconds is not None:
            self.load_seconds[run.profile] = run.load_seconds
            self.load_stages[run.profile] = stages(run) or {}
        if run.ended_at:
            self.switch_seconds[run.profile] = (run.ended_at - run.started_at).total_seconds()


def summarize(s: Session) -> MetricsSummary:
    """Aggregated in SQL: counts by kind and outcome, each profile's newest good switch, the newest
    teardown's duration."""
    counts = s.exec(select(Run.kind, Run.outcome, func.count()).group_by(Run.kind, Run.outcome)).all()
    newest = (
        select(func.max(Run.id))
        .where(Run.outcome == Outcome.ACTIVE, col(Run.profile).is_not(None))
        .group_by(Run.profile)
    )
    good = s.exec(select(Run).where(col(Run.id).in_(newest))).all()
    last_td = s.exec(select(TeardownRecord).order_by(col(TeardownRecord.id).desc()).limit(1)).first()
    out = MetricsSummary(
        counts={(k, o): int(n) for k, o, n in counts},
        teardown_seconds=json.loads(last_td.report).get("steps", {}).get("total_s") if last_td else None,
        teardown_ok=last_td.ok if last_td else None,
    )
    for run in good:
        out.switched(run)
    return out


def stages(run: Run) -> dict[str, float] | None:
    """A switch's load stages as the engine printed them ({stage: seconds}), decoded."""
    decoded = json.loads(run.load_stages) if run.load_stages else None
    return {str(k): float(v) for k, v in decoded.items()} if isinstance(decoded, dict) else None
