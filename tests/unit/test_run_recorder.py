"""The order of a run's end (runs/recorder.py): a client that reads the run as ended (the CLI and the
collection wait on the run's record, then read the host) must find the host settled. A real SQLite file,
migrated; the write is observed, not replaced."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from daemon.core.hoststate import HostState, StateHub
from daemon.core.run_types import NewRun, Outcome, RunKind
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.store.queries import Store


async def _switching(tmp_path: Path, active: str, target: str) -> tuple[RunRecorder, int]:
    """A recorder on a fresh database, the host active on `active` and switching to `target` in a run."""
    hub = StateHub()
    recorder = RunRecorder(await asyncio.to_thread(Store.open, tmp_path / "k25.db"), hub)
    hub.settle(HostState.ACTIVE, active, None)
    run_id = await recorder.create(NewRun(RunKind.SWITCH, target, active))
    recorder.begin(run_id, target)
    assert hub.status.state is HostState.SWITCHING
    return recorder, run_id


async def test_the_host_is_settled_before_the_runs_end_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, run_id = await _switching(tmp_path, "endless", "baseline")
    hub, store = recorder.hub, recorder.store

    seen: list[tuple[HostState, int | None, str | None]] = []
    write = store.finish_run

    def observed(**kwargs: Any) -> int | None:  # what a reader of /status sees as the end is written
        seen.append((hub.status.state, hub.status.run_id, hub.status.active_profile))
        return write(**kwargs)

    monkeypatch.setattr(store, "finish_run", observed)
    back = HostAfter(HostState.ACTIVE, "endless")
    await recorder.finish(run_id, Outcome.CANCELLED, detail="cancelled while draining", host=back)

    assert seen == [(HostState.ACTIVE, None, "endless")]
    view = await asyncio.to_thread(store.get_run, run_id=run_id)
    assert view is not None
    assert view.run.outcome == Outcome.CANCELLED


async def test_an_end_that_another_run_carries_on_leaves_the_host_switching(tmp_path: Path) -> None:
    """A failed switch ends with its rollback named (no HostAfter): the host stays switching."""
    recorder, run_id = await _switching(tmp_path, "baseline", "brittle")
    hub = recorder.hub
    await recorder.finish(run_id, Outcome.FAILED, error="crashed while loading", rollback_run_id=run_id + 1)
    assert (hub.status.state, hub.status.run_id) == (HostState.SWITCHING, run_id)
