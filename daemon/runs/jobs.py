"""One long job at a time: a benchmark or an experiment. While one runs, an operator's switch and another
job get 409 naming it; cancelling a job's run (or a benchmark inside an experiment) cancels just that task.
The host status carries the job's one-line progress."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from daemon.core.errors import Busy
from daemon.core.hoststate import StateHub

log = logging.getLogger("k25.jobs")


class Jobs:
    def __init__(self, hub: StateHub) -> None:
        self.hub = hub
        self.top: tuple[str, int] | None = None  # (kind, run id) of the job holding the slot
        self.tasks: dict[int, asyncio.Task[Any]] = {}  # every running job task, inner benchmarks too
        self._lines: dict[int, str] = {}
        self.cancelling: set[int] = set()

    def busy_reason(self) -> str | None:
        if self.top is None:
            return None
        kind, run_id = self.top
        if not run_id:
            return f"a {kind} is starting"
        return f"{kind} run {run_id} is in progress (cancel it first: POST /runs/{run_id}/cancel)"

    def check_free(self) -> None:
        if why := self.busy_reason():
            raise Busy(why)

    def claim(self, kind: str) -> None:
        """Hold the slot while the job's run is being created (before any await: atomic in one loop)."""
        self.check_free()
        self.top = (kind, 0)

    def release(self) -> None:
        """The claimed job never started (its run could not be created)."""
        self.top = None

    def start(
        self, kind: str, run_id: int, job: Coroutine[Any, Any, Any], *, inner: bool = False
    ) -> asyncio.Task[Any]:
        """Run `job` as run `run_id`'s task; a top-level job (claimed first) holds the slot until it ends."""
        if not inner:
            self.top = (kind, run_id)
        task = asyncio.create_task(job)
        self.tasks[run_id] = task

        def ended(_: asyncio.Task[Any]) -> None:
            self.tasks.pop(run_id, None)
            self.cancelling.discard(run_id)
            self._lines.pop(run_id, None)
            if self.top == (kind, run_id):
                self.top = None
            self._publish()

        task.add_done_callback(ended)
        return task

    def say(self, run_id: int, line: str) -> None:
        self._lines[run_id] = line
        self._publish()

    def _publish(self) -> None:
        top = self.top[1] if self.top else None
        text = " | ".join(self._lines[k] for k in sorted(self._lines)) or None
        if (top, text) != (self.hub.status.job_run_id, self.hub.status.job):
            self.hub.update(job_run_id=top, job=text)

    def cancel(self, run_id: int) -> bool:
        """Cancel a running job's run; False when `run_id` is not one (the switcher may own it)."""
        task = self.tasks.get(run_id)
        if task is None:
            return False
        if run_id in self.cancelling:
            raise Busy(f"run {run_id} is already being cancelled")
        self.cancelling.add(run_id)
        log.info("run %d: cancel requested", run_id)
        task.cancel()
        return True

    async def wait(self, run_id: int) -> None:
        task = self.tasks.get(run_id)
        if task is not None:
            await asyncio.wait({task})
