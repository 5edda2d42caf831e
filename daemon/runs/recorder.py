"""The one writer of a run's progress. Each step goes, in this order, to the database (event row and the
run's phase), the in-memory host status, the run's SSE followers and the log, so that none of them can
disagree with another; a run's end settles the host first (`finish` says why)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from daemon.core import redact
from daemon.core.hoststate import HostState, StateHub
from daemon.core.run_types import NewRun, Outcome, Phase, Progress, RunEventJson
from daemon.runs.held import HeldWrites
from daemon.store.models import utcnow
from daemon.store.queries import Store
from daemon.store.switch_cost import SwitchCostStore
from daemon.teardown.report import TeardownReport

T = TypeVar("T")

log = logging.getLogger("k25.runs")


@dataclass(frozen=True)
class HostAfter:
    """What the host is once a run has ended (None on `finish`: another run carries on, e.g. a rollback)."""

    state: HostState
    active_profile: str | None = None
    reason: str | None = None


class RunRecorder:
    def __init__(self, store: Store, hub: StateHub, *, held_retry_s: float = 5.0) -> None:
        self.store = store
        self.hub = hub
        self.cost = SwitchCostStore(store)  # what switches cost the clients (/metrics reads its summary)
        self.held = HeldWrites(store, hub, retry_s=held_retry_s)  # a full disk must not lose what happened

    async def create(self, new: NewRun, *, happened: bool = False) -> int:
        """A new run. `happened`: it records what already happened (a serving run, a unit changed by hand),
        held in memory if the database cannot take it now; otherwise (a switch, a benchmark) a database
        that cannot be written refuses it (StoreError: 503)."""
        if happened:
            run_id = await self.held.create(new)
        else:
            self.held.refuse_if_holding()
            run_id = await asyncio.to_thread(self.store.create_run, new)
        link = f" (after run {new.parent_id})" if new.parent_id else ""
        argv = redact.argv(new.argv) if new.argv else None
        log.info("run %d: %s %s%s created; argv %s", run_id, new.kind, new.profile or "-", link, argv)
        return run_id

    def begin(self, run_id: int, target: str) -> None:
        """The host is switching to `target` under this run (a switch or a rollback)."""
        self.hub.begin_switch(run_id, target)

    async def event(
        self,
        run_id: int,
        phase: Phase,
        detail: str = "",
        *,
        progress: Progress | None = None,
        load_seconds: float | None = None,
        load_stages: dict[str, float] | None = None,
    ) -> None:
        stages = dict(load_stages) if load_stages is not None else None
        stored = await self.held.write(
            f"run {run_id} event {phase}",
            lambda: self.store.add_event(
                run_id=run_id,
                phase=phase,
                detail=detail,
                progress=progress,
                load_seconds=load_seconds,
                load_stages=stages,
            ),
        )
        if self.hub.status.run_id == run_id:
            loading = phase is Phase.LOADING
            shown = detail.removeprefix("draining: ") if phase is Phase.DRAINING else None
            self.hub.phase(phase, progress if loading else None, shown)
        event = RunEventJson(id=stored or 0, phase=phase, detail=detail, at=time.time())
        if progress is not None:
            event["progress_percent"] = progress.percent
            event["progress_done"] = progress.done
            event["progress_total"] = progress.total
        self.hub.publish_run(run_id, event)
        log.info("run %d: %s: %s", run_id, phase, _one_line(detail))

    async def finish(
        self,
        run_id: int,
        outcome: Outcome,
        *,
        error: str | None = None,
        load_seconds: float | None = None,
        host: HostAfter | None = None,
        rollback_run_id: int | None = None,
        detail: str | None = None,
    ) -> None:
        """`error` is kept on the run; `detail` (a normal end's why) goes only to its final event. The host
        settles before the end is written: clients wait on the run's record and then read the host (the
        CLI, the collection), so a run that reads ended must find the host no longer switching; written
        first, a loaded daemon once answered `switching` after the run read `cancelled`."""
        if host is not None:
            self.settle(host)
        stored = await self.held.write(
            f"run {run_id} end ({outcome})",
            lambda: self.store.finish_run(
                run_id=run_id, outcome=outcome, error=error, load_seconds=load_seconds, detail=detail
            ),
        )
        event = RunEventJson(
            id=stored or 0,
            phase=outcome.phase,
            detail=detail or error or "",
            at=time.time(),
            final=True,
            rollback_run_id=rollback_run_id,
        )
        self.hub.publish_run(run_id, event)
        level = logging.INFO if outcome in (Outcome.ACTIVE, Outcome.OK) else logging.WARNING
        then = f"; rolling back in run {rollback_run_id}" if rollback_run_id else ""
        log.log(
            level, "run %d: ended %s%s%s", run_id, outcome, f": {_one_line(error)}" if error else "", then
        )

    async def teardown(self, run_id: int, report: TeardownReport) -> None:
        """The teardown's report stored with the run, one event that sums it up, one log line per
        decision (who got which signal and why, which files went)."""
        data = report.to_dict()
        await self.held.write(
            f"run {run_id} teardown",
            lambda: self.store.save_teardown(run_id=run_id, ok=report.ok, report=data),
        )
        for o in report.processes:
            log.warning(
                "run %d: teardown: pid %d (%s) %s after %s; reasons: %s",
                run_id,
                o.pid,
                o.title[:80],
                o.outcome or "not signalled",
                "+".join(o.signals) or "no signal",
                "; ".join(o.reasons),
            )
        for name in report.shm_removed:
            log.info("run %d: teardown: removed /dev/shm/%s (engine file, held by nobody)", run_id, name)
        killed = ", ".join(
            f"{o.pid} {o.title[:40]} ({'+'.join(o.signals) or o.outcome})" for o in report.processes
        )
        verdict = "GPUs clean" if report.ok else f"NOT clean: {report.error}"
        total = report.steps.get("total_s")
        detail = (
            f"{verdict}; signalled {len(report.processes)}{f' ({killed})' if killed else ''}; "
            f"removed {len(report.shm_removed)} shm file(s)"
            + (f"; {total:.2f}s" if total is not None else "")
        )
        await self.event(run_id, Phase.TEARDOWN, detail)

    async def out_of_rotation(self, run_id: int, at: datetime) -> None:
        await self.held.write(
            f"run {run_id} out of rotation", lambda: self.cost.out_of_rotation(run_id=run_id, at=at)
        )
        log.info("run %d: out of rotation (/ready 503)", run_id)

    async def back_in_rotation(self, run_id: int, down_at: datetime) -> None:
        up = utcnow()
        await self.held.write(
            f"run {run_id} back in rotation",
            lambda: self.cost.back_in_rotation(run_id=run_id, down_at=down_at, up_at=up),
        )
        log.info(
            "run %d: back in rotation (/ready 200) after %.1fs out", run_id, (up - down_at).total_seconds()
        )

    async def drained(
        self, run_id: int, *, seconds: float | None, finished: int, cut: int, timed_out: bool
    ) -> None:
        await self.held.write(
            f"run {run_id} drain",
            lambda: self.cost.drained(
                run_id=run_id, seconds=seconds, finished=finished, cut=cut, timed_out=timed_out
            ),
        )
        if cut:
            log.warning("run %d: %d request(s) still in flight at the stop: cut", run_id, cut)

    async def write(self, what: str, fn: Callable[[], T]) -> T | None:
        """A record that belongs to a run (a metric row, its served time): written, or held while the
        database cannot take it."""
        return await self.held.write(what, fn)

    async def close(self) -> None:
        await self.held.close()

    def settle(self, host: HostAfter) -> None:
        """The host's state once no run is in progress: no target, no phase, no progress."""
        self.hub.settle(host.state, host.active_profile, host.reason)


def _one_line(text: str | None, limit: int = 400) -> str:
    flat = " | ".join(line for line in (text or "").splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
