"""The GPUs' events and the marks they leave, kept across daemon restarts (a GPU that needs a reset still
needs one after the daemon restarts)."""

from __future__ import annotations

from collections import Counter

from sqlalchemy import func
from sqlmodel import col, select

from daemon.host.gpu_health import DriverEvent
from daemon.store.models import GpuEvent, GpuMark
from daemon.store.queries import Store


class GpuHealthStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def add_event(self, e: DriverEvent) -> int:
        row = GpuEvent(
            at=e.at,
            gpu=e.gpu,
            bus_id=e.bus_id,
            source=e.source,
            kind=e.kind,
            code=e.code,
            pid=e.pid,
            message=e.message,
        )
        with self.store.session() as s:
            s.add(row)
            s.commit()
            s.refresh(row)
        return row.id or 0

    def merge_source(self, event_id: int, e: DriverEvent) -> None:
        """The same event from the other source: one row names both, keeping the kernel's pid and text."""
        with self.store.session() as s:
            row = s.get(GpuEvent, event_id)
            if row is None:
                return
            row.source = "nvml+kernel"
            row.pid = row.pid if row.pid is not None else e.pid
            if e.source == "kernel":
                row.message, row.bus_id = e.message, e.bus_id or row.bus_id
            s.add(row)
            s.commit()

    def events(self, limit: int = 50, gpu: int | None = None) -> list[DriverEvent]:
        with self.store.session() as s:
            q = select(GpuEvent).order_by(col(GpuEvent.at).desc()).limit(limit)
            if gpu is not None:
                q = q.where(GpuEvent.gpu == gpu)
            rows = s.exec(q).all()
        return [DriverEvent(r.at, r.source, r.code, r.gpu, r.bus_id, r.pid, r.message, r.kind) for r in rows]

    def xid_counts(self) -> Counter[tuple[int, int]]:
        """Xids recorded per (GPU, code), for k25_gpu_xid_total."""
        with self.store.session() as s:
            q = (
                select(GpuEvent.gpu, GpuEvent.code, func.count())
                .where(GpuEvent.kind == "xid")
                .group_by(col(GpuEvent.gpu), col(GpuEvent.code))
            )
            rows = s.exec(q).all()
        return Counter({(int(g), int(c)): int(n) for g, c, n in rows if g is not None})

    def add_mark(self, mark: GpuMark) -> None:
        with self.store.session() as s:
            s.add(mark)
            s.commit()

    def marks(self) -> list[GpuMark]:
        """The marks not cleared yet, oldest first."""
        with self.store.session() as s:
            q = select(GpuMark).where(col(GpuMark.cleared_at).is_(None)).order_by(col(GpuMark.id))
            return list(s.exec(q).all())

    def clear(self, gpus: list[int], at: float, run_id: int) -> int:
        with self.store.session() as s:
            rows = s.exec(
                select(GpuMark).where(col(GpuMark.cleared_at).is_(None), col(GpuMark.gpu).in_(gpus))
            ).all()
            for r in rows:
                r.cleared_at, r.cleared_by_run = at, run_id
                s.add(r)
            s.commit()
        return len(rows)
