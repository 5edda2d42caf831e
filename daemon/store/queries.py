"""Keyword-only queries over the runs database. Synchronous: callers in async code use asyncio.to_thread."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Collection, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from sqlalchemy import Engine, Executable, event, func, text
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlmodel import Session, col, select

from daemon.core.errors import StoreError, StoreUnwritable
from daemon.core.jsontypes import StoredJson
from daemon.core.run_types import FINAL_OUTCOMES, NewRun, Outcome, Phase, Progress, RunKind
from daemon.store.db import healthy, make_engine, move_aside, private, upgrade
from daemon.store.models import Experiment, Run, RunEvent, TeardownRecord, utcnow
from daemon.store.summary import MetricsSummary, stages, summarize


@dataclass(frozen=True)
class RunView:
    """A run with its events and teardowns; its JSON columns decoded."""

    run: Run
    events: list[RunEvent]
    teardowns: list[TeardownRecord]

    @property
    def argv(self) -> list[str] | None:
        return [str(a) for a in json.loads(self.run.argv)] if self.run.argv else None

    @property
    def load_stages(self) -> dict[str, float] | None:
        return stages(self.run)


# SQLite's words for a database that cannot take a write now but may later (SQLITE_FULL, READONLY, IOERR).
UNWRITABLE = ("database or disk is full", "readonly database", "disk I/O error")


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # Every COMMIT on the database, counted: a reader's cache built from rows holds until it changes.
        self._commits = itertools.count(1)
        self.commits = 0
        event.listen(engine, "commit", self._committed)
        self.recovered: str | None = None  # set when a broken database was moved aside at start
        self._summary: MetricsSummary | None = None
        self._summary_lock = threading.Lock()

    def _committed(self, _conn: object) -> None:
        self.commits = next(self._commits)  # atomic under the GIL: two commits never read as one

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        """A session; any database failure (locked, disk full, corrupt) becomes a StoreError here."""
        try:
            with Session(self.engine) as s:
                yield s
        except SQLAlchemyError as e:
            text = f"{e.__class__.__name__}: {e.args[0] if e.args else e}"
            if isinstance(e, OperationalError) and any(w in text for w in UNWRITABLE):
                raise StoreUnwritable(f"the runs database cannot be written: {text}") from e
            raise StoreError(f"the runs database failed: {text}") from e

    def erase(self, *statements: Executable) -> None:
        """Run deletes of captured text so that the text leaves the files, not only the tables: the freed
        pages overwritten (secure_delete), then the WAL checkpointed into the main file and truncated (the
        zeroed pages sit in the WAL, the main file keeps the old ones until a checkpoint). The one path
        for every delete of captured text: the capture's purge and a dataset's delete."""
        with self.session() as s:
            s.execute(text("PRAGMA secure_delete=ON"))
            for statement in statements:
                s.execute(statement)
            s.execute(text("PRAGMA secure_delete=OFF"))  # per connection: the pooled one goes back as it was
            s.commit()
        with self.session() as s:
            busy = s.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()[0]
        if busy:  # a reader held an older snapshot past the busy timeout: the old pages are still there
            raise StoreError("the deleted text is still in the database's files (a reader held the WAL)")

    @classmethod
    def open(cls, path: Path) -> Store:
        """Upgrade the schema to head, then open: what the daemon does on start. A database that is empty,
        corrupt or cannot be migrated is moved aside and a fresh one created: the daemon keeps control
        working, and `recovered` says what happened (the daemon shows it loudly)."""
        recovered = None
        if why := healthy(path):
            recovered = f"{why}; moved to {move_aside(path, why)}; run history starts fresh"
        try:
            private(path)
            upgrade(path)
        except Exception as e:  # alembic/SQLAlchemy on a damaged file: the same remedy, once
            why = f"the database could not be migrated: {e}"
            recovered = f"{why}; moved to {move_aside(path, why)}; run history starts fresh"
            private(path)
            upgrade(path)
        engine = make_engine(path)
        with engine.connect():  # sets WAL (persistent in the file) before anyone reads
            pass
        store = cls(engine)
        store.recovered = recovered
        return store

    def create_run(self, new: NewRun, run_id: int | None = None) -> int:
        """A new run; `run_id` where its id was given out before the row could be written (runs/held.py)."""
        with self.session() as s:
            fields = asdict(new) | {"argv": json.dumps(new.argv) if new.argv is not None else None}
            run = Run(id=run_id, **fields)
            s.add(run)
            s.commit()
            self._count(new.kind, Outcome.RUNNING, +1)
            return _id(run.id)

    def max_run_id(self) -> int:
        with self.session() as s:
            return int(s.exec(select(func.max(Run.id))).one() or 0)

    def _count(self, kind: str, outcome: str, n: int) -> None:
        with self._summary_lock:
            if self._summary is not None:
                self._summary.count(kind, outcome, n)

    def add_event(
        self,
        *,
        run_id: int,
        phase: Phase,
        detail: str = "",
        progress: Progress | None = None,
        load_seconds: float | None = None,
        load_stages: dict[str, float] | None = None,
    ) -> int:
        """One event and the run's current phase (its load progress, its load time once HTTP is up, the
        load stages seen so far) in one transaction; returns the event's id."""
        with self.session() as s:
            run = require_run(s, run_id)
            event = RunEvent(run_id=run_id, phase=phase, detail=detail)
            run.phase = phase
            if progress is not None:
                run.progress_percent, run.progress_done = progress.percent, progress.done
                run.progress_total = progress.total
                event.progress_percent, event.progress_done = progress.percent, progress.done
                event.progress_total = progress.total
            if load_seconds is not None:
                run.load_seconds = load_seconds
            if load_stages is not None:
                run.load_stages = json.dumps(load_stages)
            s.add_all([event, run])
            s.commit()
            return _id(event.id)

    def finish_run(
        self,
        *,
        run_id: int,
        outcome: Outcome,
        error: str | None = None,
        load_seconds: float | None = None,
        detail: str | None = None,
    ) -> int:
        """The run's outcome, end and final phase, and its last event; returns that event's id."""
        with self.session() as s:
            run = require_run(s, run_id)
            run.outcome, run.ended_at, run.phase = outcome, utcnow(), outcome.phase
            if error is not None:
                run.error = error
            if load_seconds is not None:
                run.load_seconds = load_seconds
            event = RunEvent(run_id=run_id, phase=outcome.phase, detail=detail or error or "")
            s.add_all([event, run])
            s.commit()
            self._count(run.kind, Outcome.RUNNING, -1)
            self._count(run.kind, outcome, +1)
            if outcome is Outcome.ACTIVE:
                with self._summary_lock:
                    if self._summary is not None:
                        self._summary.switched(run)
            return _id(event.id)

    def save_teardown(self, *, run_id: int | None, ok: bool, report: StoredJson) -> int:
        with self.session() as s:
            rec = TeardownRecord(run_id=run_id, ok=ok, report=json.dumps(report, default=str))
            s.add(rec)
            s.commit()
            rec_id = _id(rec.id)
        total = (report.get("steps") or {}).get("total_s")
        with self._summary_lock:
            if self._summary is not None and total is not None:
                self._summary.teardown_seconds = float(total)
            if self._summary is not None:
                self._summary.teardown_ok = ok
        return rec_id

    def get_run(self, *, run_id: int) -> RunView | None:
        with self.session() as s:
            run = s.get(Run, run_id)
            if run is None:
                return None
            events = s.exec(
                select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
            ).all()
            tds = s.exec(select(TeardownRecord).where(TeardownRecord.run_id == run_id)).all()
            return RunView(run, list(events), list(tds))

    def switch_of(self, serving_run_id: int) -> RunView | None:
        """The switch that started a serving run (its parent), with what it recorded."""
        serving = self.get_run(run_id=serving_run_id)
        parent = serving.run.parent_id if serving else None
        return self.get_run(run_id=parent) if parent else None

    def list_runs(
        self, *, profile: str | None = None, parent: int | None = None, limit: int = 50
    ) -> list[Run]:
        with self.session() as s:
            q = select(Run).order_by(col(Run.id).desc()).limit(limit)
            if profile:
                q = q.where(Run.profile == profile)
            if parent is not None:
                q = q.where(Run.parent_id == parent)
            return list(s.exec(q).all())

    def mark_interrupted(self, keep: Collection[int] = ()) -> list[int]:
        """Runs left unfinished by a daemon that died end as `interrupted`, except `keep` (a serving run
        whose engine still serves)."""
        with self.session() as s:
            q = select(Run).where(col(Run.outcome).not_in(FINAL_OUTCOMES), col(Run.id).not_in(list(keep)))
            runs = s.exec(q).all()
            for run in runs:
                run.outcome, run.ended_at = Outcome.INTERRUPTED, utcnow()
                run.phase = Phase.INTERRUPTED
                s.add(run)
                s.add(
                    RunEvent(
                        run_id=run.id or 0,
                        phase=Phase.INTERRUPTED,
                        detail="the daemon stopped during the run",
                    )
                )
            s.commit()
            self.forget_summary()
            return [r.id for r in runs if r.id is not None]

    def metrics_summary(self) -> MetricsSummary:
        """A copy of the current summary (computed in SQL the first time, and after `forget_summary`)."""
        with self._summary_lock:
            if self._summary is None:
                with self.session() as s:
                    self._summary = summarize(s)
            return self._summary.copy()

    def forget_summary(self) -> None:
        """Runs changed in bulk (interrupted at start, pruned): the next scrape aggregates again."""
        with self._summary_lock:
            self._summary = None

    def open_runs(self, *, kind: RunKind) -> list[Run]:
        with self.session() as s:
            q = select(Run).where(Run.kind == kind, Run.outcome == Outcome.RUNNING).order_by(col(Run.id))
            return list(s.exec(q).all())

    def interrupted_experiment(self, run_ids: Collection[int]) -> ExperimentLeft | None:
        """The newest of these runs that was an experiment (a sweep or not): what it was to restore (None:
        it was to stay), and a sweep's variants' units."""
        with self.session() as s:
            q = select(Experiment).where(col(Experiment.run_id).in_(list(run_ids)))
            for exp in s.exec(q.order_by(col(Experiment.run_id).desc())).all():
                request = json.loads(exp.request)
                if not isinstance(request, dict):
                    continue
                back = request.get("restore_to")
                units = {str(v["unit"]): str(v["name"]) for v in request.get("variants") or ()}
                return ExperimentLeft(exp.run_id, back if isinstance(back, str) else None, units)
            return None

    def last_good_profile(self) -> str | None:
        """The profile of the newest run that ended active: what rollback returns to."""
        with self.session() as s:
            q = select(Run).where(Run.outcome == Outcome.ACTIVE).order_by(col(Run.id).desc()).limit(1)
            run = s.exec(q).first()
            return run.profile if run else None

    def last_engine_version(self, profile: str, before: int) -> tuple[int, str] | None:
        """The newest run of `profile` before run `before` that knew its engine version: (id, version)."""
        with self.session() as s:
            q = (
                select(Run)
                .where(Run.profile == profile, col(Run.engine_version).is_not(None), col(Run.id) < before)
                .order_by(col(Run.id).desc())
                .limit(1)
            )
            run = s.exec(q).first()
            return (_id(run.id), run.engine_version or "") if run else None


@dataclass(frozen=True)
class ExperimentLeft:
    """An experiment (a sweep or not) that a daemon restart cut short."""

    run_id: int
    restore_to: str | None
    variants: dict[str, str]  # unit -> variant name


def require_run(s: Session, run_id: int) -> Run:
    run = s.get(Run, run_id)
    if run is None:
        raise LookupError(f"no run {run_id}")
    return run


def _id(value: int | None) -> int:
    if value is None:  # the database assigns it on commit
        raise RuntimeError("row has no id after commit")
    return value
