"""Captured requests: appended in batches by the capture sink's writer, bounded by rows, bytes and age (the
oldest go first), read back as a window for a dataset, exported or purged. The totals (rows, bytes,
categories, span) are kept in memory, read from the table once: neither a cap nor `k25-ctl capture status`
sums the table. Every column a cap reads comes before `body`, so the scans skip the bodies' pages."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import delete, func
from sqlmodel import col, select

from daemon.store.models import Captured
from daemon.store.queries import Store

DELETE_CHUNK = 1000  # oldest rows examined at a time when a cap is passed


@dataclass(frozen=True)
class NewCapture:
    at: float
    endpoint: str
    model: str | None
    category: str | None
    body: str  # JSON: prompt or messages, and the sampling parameters

    @property
    def size(self) -> int:
        return len(self.body.encode())


@dataclass(frozen=True)
class Caps:
    max_rows: int
    max_bytes: int
    retention_s: float


@dataclass
class Totals:
    rows: int = 0
    bytes: int = 0
    oldest: float | None = None
    newest: float | None = None
    categories: Counter[str] = field(default_factory=Counter)

    def count(self, rows: Iterable[tuple[float, int, str | None]], sign: int) -> None:
        for at, size, category in rows:
            self.rows += sign
            self.bytes += sign * size
            self.categories[category or "-"] += sign
            if sign > 0:
                self.newest = at if self.newest is None else max(self.newest, at)
                self.oldest = at if self.oldest is None else min(self.oldest, at)
        self.categories = +self.categories  # drop zeros
        if not self.rows:
            self.oldest = self.newest = None

    def copy(self) -> Totals:
        return Totals(self.rows, self.bytes, self.oldest, self.newest, Counter(self.categories))


@dataclass(frozen=True)
class Added:
    kept: int
    dropped: int  # rows removed by the caps and the retention in the same write


# What the caps read of a row: never its body.
_HEAD = (col(Captured.id), col(Captured.at), col(Captured.size), col(Captured.category))
Head = tuple[int, float, int, str | None]  # id, at, size, category


def _heads(rows: Iterable[tuple[int | None, float, int, str | None]]) -> list[Head]:
    return [(int(r[0] or 0), float(r[1]), int(r[2]), r[3]) for r in rows]


class CaptureStore:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()  # one writer (the sink's), purges and reads of the totals
        self._totals: Totals | None = None

    def _loaded(self) -> Totals:
        if self._totals is None:
            with self.store.session() as s:
                rows = s.exec(select(Captured.at, Captured.size, Captured.category)).all()
            self._totals = Totals()
            self._totals.count(((r[0], r[1], r[2]) for r in rows), +1)
        return self._totals

    def add(self, new: Sequence[NewCapture], caps: Caps, now: float) -> Added:
        """Append `new`, then drop what is older than the retention and the oldest past the caps."""
        with self._lock:
            totals = self._loaded()
            gone: list[Head] = []
            with self.store.session() as s:
                if new:  # the driver's executemany: the ORM's bulk insert held the GIL ~10x longer
                    s.connection().exec_driver_sql(INSERT, [_values(n) for n in new])
                    totals.count(((n.at, n.size, n.category) for n in new), +1)
                old = _heads(s.exec(select(*_HEAD).where(col(Captured.at) < now - caps.retention_s)).all())
                gone += old
                totals.count(((r[1], r[2], r[3]) for r in old), -1)
                after = 0
                while totals.rows > caps.max_rows or totals.bytes > caps.max_bytes:
                    # As many of the oldest as the row cap says are over (at least a few for the byte cap):
                    # under a flood each batch removes about as many as it added, not a chunk each time.
                    want = min(DELETE_CHUNK, max(totals.rows - caps.max_rows, 2 * len(new), 8))
                    oldest = _heads(
                        s.exec(
                            select(*_HEAD)
                            .where(col(Captured.id) > after)
                            .order_by(col(Captured.id))
                            .limit(want)
                        ).all()
                    )
                    if not oldest:
                        break
                    for r in oldest:
                        if totals.rows <= caps.max_rows and totals.bytes <= caps.max_bytes:
                            break
                        if r[1] >= now - caps.retention_s:  # not already gone by age
                            gone.append(r)
                            totals.count([(r[1], r[2], r[3])], -1)
                    after = oldest[-1][0]
                for i in range(0, len(gone), DELETE_CHUNK):
                    ids = [r[0] for r in gone[i : i + DELETE_CHUNK]]
                    s.execute(delete(Captured).where(col(Captured.id).in_(ids)))
                if gone and totals.rows:  # the new oldest, from the index on `at`
                    totals.oldest = s.exec(select(func.min(Captured.at))).one()
                s.commit()
            return Added(len(new), len(gone))

    def totals(self) -> Totals:
        with self._lock:
            return self._loaded().copy()

    def window(self, since: float | None, until: float | None, categories: list[str]) -> list[Captured]:
        """The captured requests in [since, until] (of those categories, when named), oldest first."""
        q = select(Captured).order_by(col(Captured.at), col(Captured.id))
        if since is not None:
            q = q.where(col(Captured.at) >= since)
        if until is not None:
            q = q.where(col(Captured.at) <= until)
        if categories:
            q = q.where(col(Captured.category).in_(categories))
        with self.store.session() as s:
            return list(s.exec(q).all())

    def export_page(self, after: int, limit: int = 1000) -> tuple[list[str], int]:
        """The captured requests after id `after` as JSON lines, oldest first; and the last id read."""
        with self.store.session() as s:
            q = select(Captured).where(col(Captured.id) > after).order_by(col(Captured.id)).limit(limit)
            page = s.exec(q).all()
        lines = [
            json.dumps(
                {"at": r.at, "endpoint": r.endpoint, "model": r.model, "category": r.category}
                | json.loads(r.body)
            )
            for r in page
        ]
        return lines, int(page[-1].id or 0) if page else after

    def purge(self) -> int:
        """Delete every captured request, the freed pages overwritten (secure_delete) and the WAL emptied:
        the text is gone from the files, not only unlinked."""
        with self._lock:
            n = self._loaded().rows
            self.store.erase(delete(Captured))
            self._totals = Totals()
            return n


INSERT = "INSERT INTO captured (at, endpoint, model, category, size, body) VALUES (?, ?, ?, ?, ?, ?)"


def _values(n: NewCapture) -> tuple[float, str, str | None, str | None, int, str]:
    return (n.at, n.endpoint, n.model, n.category, n.size, n.body)
