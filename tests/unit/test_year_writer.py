"""perf/history.py's year, small: the writer fills a real migrated database through the store layer with
every row at the time it would have had (switches through the days, an experiment's rounds, serving rows
as the retention leaves them), and the store reads it back as the daemon does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.store.bench import BenchStore
from daemon.store.db import revisions
from daemon.store.queries import Store
from perf.year.writer import Year, YearWriter


def test_a_small_year_is_written_at_its_own_times_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "k25.db"
    year = Year(days=3, switches=4, experiments=7, rounds=2, levels=(1, 4), requests=10, captures=50)
    written = YearWriter(path, year).write(progress=False)
    assert written.benchmarks == 3 * 2 * 2  # an experiment a day of 2 rounds x 2 profiles
    assert written.request_records == written.benchmarks * 2 * 10
    current, head = revisions(path)
    assert current == head
    store = Store.open(path)
    runs = store.list_runs(limit=1000)
    started = sorted(r.started_at.replace(tzinfo=UTC) for r in runs)
    now = datetime.now(UTC)
    assert now - started[0] > timedelta(days=2), started[0]  # the first day's, not the time of writing
    assert all(s <= now for s in started)
    recent = BenchStore(store).recent(limit=100)
    assert len(recent) == written.benchmarks
    assert {v.bench.round for v in recent} == {0, 1}
    assert all(len(v.levels) == 2 for v in recent)
