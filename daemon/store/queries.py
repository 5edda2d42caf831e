"""Keyword-only queries over the runs database. Synchronous: callers in async code use asyncio.to_thread."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from daemon.store.db import make_engine, upgrade
from daemon.store.models import Run, RunEvent, TeardownRecord, utcnow

FINAL = ("active", "failed", "cancelled", "interrupted", "degraded", "noop", "ok", "needs_reset")


@dataclass(frozen=True)
class RunView:
    run: Run
    events: list[RunEvent]
    teardowns: list[TeardownRecord]


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, path: Path) -> Store:
        """Upgrade the schema to head, then open: what the daemon does on start."""
        upgrade(path)
        engine = make_engine(path)
        with engine.connect():  # sets WAL (persistent in the file) before anyone reads
            pass
        return cls(engine)

    def create_run(
        self,
        *,
        kind: str,
        profile: str | None,
        from_profile: str | None = None,
        parent_id: int | None = None,
        argv: list[str] | None = None,
        profile_sha256: str | None = None,
        unit: str | None = None,
    ) -> int:
        with Session(self.engine) as s:
            run = Run(
                kind=kind,
                profile=profile,
                from_profile=from_profile,
                parent_id=parent_id,
                argv=json.dumps(argv) if argv is not None else None,
                profile_sha256=profile_sha256,
                unit=unit,
            )
            s.add(run)
            s.commit()
            return _id(run.id)

    def add_event(self, *, run_id: int, phase: str, detail: str = "", **fields: Any) -> int:
        """One event, and the run's current phase (plus any run fields given) in the same transaction;
        returns the event's id."""
        with Session(self.engine) as s:
            event = RunEvent(run_id=run_id, phase=phase, detail=detail)
            s.add(event)
            run = s.get(Run, run_id)
            if run is not None:
                run.phase = phase
                for k, v in fields.items():
                    setattr(run, k, v)
                s.add(run)
            s.commit()
            return _id(event.id)

    def finish_run(self, *, run_id: int, outcome: str, error: str | None = None, **fields: Any) -> int:
        """The run's outcome and end, and its last event; returns that event's id."""
        with Session(self.engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                raise LookupError(f"no run {run_id}")
            run.outcome, run.ended_at = outcome, utcnow()
            if error is not None:
                run.error = error
            for k, v in fields.items():
                setattr(run, k, v)
            s.add(run)
            event = RunEvent(run_id=run_id, phase=outcome, detail=error or "")
            s.add(event)
            s.commit()
            return _id(event.id)

    def save_teardown(self, *, run_id: int | None, ok: bool, report: dict[str, Any]) -> int:
        with Session(self.engine) as s:
            rec = TeardownRecord(run_id=run_id, ok=ok, report=json.dumps(report, default=str))
            s.add(rec)
            s.commit()
            return _id(rec.id)

    def get_run(self, *, run_id: int) -> RunView | None:
        with Session(self.engine) as s:
            run = s.get(Run, run_id)
            if run is None:
                return None
            events = s.exec(
                select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
            ).all()
            tds = s.exec(select(TeardownRecord).where(TeardownRecord.run_id == run_id)).all()
            return RunView(run, list(events), list(tds))

    def list_runs(self, *, profile: str | None = None, limit: int = 50) -> list[Run]:
        with Session(self.engine) as s:
            q = select(Run).order_by(col(Run.id).desc()).limit(limit)
            if profile:
                q = q.where(Run.profile == profile)
            return list(s.exec(q).all())

    def mark_interrupted(self) -> list[int]:
        """Runs left unfinished by a daemon that died: they end as `interrupted`."""
        with Session(self.engine) as s:
            runs = s.exec(select(Run).where(col(Run.outcome).not_in(FINAL))).all()
            for run in runs:
                run.outcome, run.ended_at = "interrupted", utcnow()
                s.add(run)
                s.add(
                    RunEvent(
                        run_id=run.id or 0, phase="interrupted", detail="the daemon stopped during the run"
                    )
                )
            s.commit()
            return [r.id for r in runs if r.id is not None]

    def metrics_summary(self) -> dict[str, Any]:
        """What /metrics exports from the database: run counts, each profile's last load and switch
        durations, the last teardown's duration."""
        with Session(self.engine) as s:
            runs = s.exec(select(Run).order_by(col(Run.id))).all()
            last_td = s.exec(select(TeardownRecord).order_by(col(TeardownRecord.id).desc()).limit(1)).first()
        counts: dict[tuple[str, str], int] = {}
        load: dict[str, float] = {}
        switch: dict[str, float] = {}
        for r in runs:
            counts[(r.kind, r.outcome)] = counts.get((r.kind, r.outcome), 0) + 1
            if r.outcome == "active" and r.profile:
                if r.load_seconds is not None:
                    load[r.profile] = r.load_seconds
                if r.ended_at:
                    switch[r.profile] = (r.ended_at - r.started_at).total_seconds()
        teardown_s = json.loads(last_td.report).get("steps", {}).get("total_s") if last_td else None
        return {
            "counts": counts,
            "load_seconds": load,
            "switch_seconds": switch,
            "teardown_seconds": teardown_s,
        }

    def last_good_profile(self) -> str | None:
        """The profile of the newest run that ended active: what rollback returns to."""
        with Session(self.engine) as s:
            q = select(Run).where(Run.outcome == "active").order_by(col(Run.id).desc()).limit(1)
            run = s.exec(q).first()
            return run.profile if run else None


def _id(value: int | None) -> int:
    if value is None:  # the database assigns it on commit
        raise RuntimeError("row has no id after commit")
    return value
