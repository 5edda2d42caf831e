"""Serving metrics: scrapes folded into rows (deltas, tokens/s, acceptance, an engine restart in between),
rows stored with the run's totals, compacted to hours and deleted by age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from daemon.core.profiles import Profile
from daemon.core.run_types import NewRun, RunKind
from daemon.engines import vllm
from daemon.engines.engine_types import MetricsSnapshot
from daemon.serving.metrics import MetricsWindow
from daemon.store.models import ServingMetric
from daemon.store.queries import Store
from daemon.store.serving import ServingStore

PROFILE = Profile(name="p", engine="vllm", model="/m", port=9000, gpus=[0], tensor_parallel_size=1)
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def snap(gen: float, accepted: float = 0.0, drafts: float = 0.0, running: float = 1.0) -> MetricsSnapshot:
    return MetricsSnapshot(prompt_tokens=gen / 2, generation_tokens=gen, requests=gen / 100, spec_drafts=drafts,
                           spec_draft_tokens=3 * drafts, spec_accepted=accepted, running=running)  # fmt: skip


def test_a_window_gives_rates_and_acceptance_per_period() -> None:
    w = MetricsWindow(1, PROFILE, vllm.ENGINE, period_s=60)
    assert w.add(snap(1000, 100, 200), 0.0, T0) is None
    assert w.add(snap(1500, 145, 300), 30.0, T0) is None
    row = w.add(snap(2000, 190, 400), 60.0, T0 + timedelta(seconds=60))
    assert row is not None
    assert (row.seconds, row.generation_tokens, row.tokens_per_s) == (60.0, 1000.0, 1000.0 / 60)
    assert row.acceptance_rate == 90 / 600  # accepted / drafted tokens
    assert row.acceptance_length == 1 + 90 / 200
    assert row.at == T0
    assert w.started_wall == T0 + timedelta(seconds=60)  # the scrape that closed the period opens the next


def test_an_engine_restart_is_never_a_negative_rate() -> None:
    w = MetricsWindow(1, PROFILE, vllm.ENGINE, period_s=60)
    w.add(snap(5000), 0.0, T0)
    w.add(snap(5600), 20.0, T0)
    w.add(snap(100), 40.0, T0)  # restarted: counting from zero again
    row = w.add(snap(400), 60.0, T0)
    assert row is not None
    assert row.generation_tokens == 600 + 400  # before the restart, and since it
    assert row.tokens_per_s > 0


def test_rows_keep_run_totals_and_compact_by_age(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "k25.db")
    serving = ServingStore(store)
    run_id = store.create_run(NewRun(RunKind.SERVING, "p"))
    old = T0 - timedelta(days=3)
    for i in range(3):  # three minutes, three days ago
        serving.add_row(ServingMetric(run_id=run_id, at=old + timedelta(minutes=i), seconds=60, generation_tokens=600,
                                      tokens_per_s=10, acceptance_length=1.5 + i / 10))  # fmt: skip
    serving.add_row(ServingMetric(run_id=run_id, at=T0, seconds=60, generation_tokens=1200, tokens_per_s=20))
    run = serving.run(run_id)
    assert (run.served_s, run.generation_tokens) == (240, 3000)
    assert run.acceptance_length is not None
    assert abs(run.acceptance_length - 1.6) < 1e-9  # weighted by tokens
    compacted, deleted = serving.compact(
        minutes_before=T0 - timedelta(days=1), hours_before=T0 - timedelta(days=90)
    )
    assert (compacted, deleted) == (3, 0)
    rows = serving.series(run_id)
    assert [(r.resolution, r.seconds, r.generation_tokens) for r in rows] == [
        ("hour", 180, 1800),
        ("minute", 60, 1200),
    ]
    assert rows[0].tokens_per_s == 10
    assert serving.compact(minutes_before=T0, hours_before=T0 - timedelta(days=1)) == (0, 1)
    assert [r.resolution for r in serving.series(run_id)] == ["minute"]


def test_old_finished_runs_are_pruned_with_their_rows(tmp_path: Path) -> None:
    import sqlite3

    from daemon.core.run_types import Outcome

    store = Store.open(tmp_path / "k25.db")
    serving = ServingStore(store)
    old = store.create_run(NewRun(RunKind.SWITCH, "p"))
    store.finish_run(run_id=old, outcome=Outcome.ACTIVE)
    child = store.create_run(NewRun(RunKind.SERVING, "p", parent_id=old))
    serving.add_row(ServingMetric(run_id=child, at=T0, seconds=60, generation_tokens=10, tokens_per_s=1))
    store.finish_run(run_id=child, outcome=Outcome.STOPPED)
    running = store.create_run(NewRun(RunKind.SWITCH, "p"))
    with sqlite3.connect(tmp_path / "k25.db") as c:  # the first run ended long ago
        c.execute("update runs set ended_at = '2020-01-01 00:00:00.000000' where id = ?", (old,))
    assert serving.prune_runs(before=T0 - timedelta(days=365)) == 1
    assert store.get_run(run_id=old) is None
    kept = store.get_run(run_id=child)
    assert kept is not None
    assert kept.run.parent_id is None  # its parent is gone; its own record stays
    assert len(serving.series(child)) == 1
    assert store.get_run(run_id=running) is not None  # never a run in progress
