"""The one job registry: every switch, warm, benchmark and experiment in progress is a job here, with its
run id, its kind, the job it belongs to (an experiment's switches and benchmarks) and its task. One rule
decides what may start beside what (`conflict`), one path cancels, one line says what runs: the 409's
text and `/status`'s job line both come from here.

The rules: one switch, maintenance teardown or unpark at a time (each starts, stops or kills engines); an
operator's switch, teardown or unpark waits for a benchmark or experiment, while the switches those jobs
(or the serving watch) ask for go ahead; a benchmark or experiment waits for any of them and any other
benchmark or experiment; warms run beside everything, one per profile."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from daemon.core.errors import Busy, WrongState
from daemon.core.hoststate import JobLine, StateHub

log = logging.getLogger("k25.jobs")


class JobKind(enum.StrEnum):
    SWITCH = "switch"  # a switch, restart or rollback (the transaction)
    WARM = "warm"
    BENCHMARK = "benchmark"
    EXPERIMENT = "experiment"
    TEARDOWN = "teardown"  # the maintenance teardown (POST /teardown): it kills what holds the GPUs
    UNPARK = "unpark"  # a parked engine stopped on request


HOLDS_HOST = (JobKind.BENCHMARK, JobKind.EXPERIMENT)  # measured jobs: nothing else may switch meanwhile
# Jobs that start, stop or kill engines: one at a time, whoever asks.
EXCLUSIVE = (JobKind.SWITCH, JobKind.TEARDOWN, JobKind.UNPARK)


@dataclass(eq=False)
class Job:
    kind: JobKind
    run_id: int  # 0 while its run is being created
    parent: int | None = None  # the run of the job (or serving run) that asked for it
    subject: str | None = None  # the profile it works on
    label: str = ""  # how the 409 names it
    task: asyncio.Task[Any] | None = None
    refuse_cancel: Callable[[int], str | None] = lambda _: None  # why it cannot be cancelled now, if so
    on_cancel: Callable[[], None] = lambda: None  # what a cancel does besides cancelling the task
    also: set[int] = field(default_factory=set)  # further runs it carries on as (a switch's rollback)
    isolated: bool = False  # the host is out of the balancer's rotation while it runs
    cancelling: bool = False
    # Its task has run its first step: a task cancelled before that never enters the code that ends its
    # run (asyncio throws into a coroutine that has not started), and the run would stay running for good.
    begun: asyncio.Event = field(default_factory=asyncio.Event)
    line: str | None = None  # its one-line progress, for /status

    @property
    def ids(self) -> set[int]:
        return {self.run_id, *self.also}

    @property
    def current(self) -> int:
        return max(self.ids)

    def carry_on(self, run_id: int, label: str) -> None:
        """The job goes on as another run (a failed switch's rollback)."""
        self.also.add(run_id)
        self.label = label

    def busy_text(self) -> str:
        if not self.run_id:
            return f"a {self.kind} is starting"
        if self.kind in EXCLUSIVE:
            return f"run {self.current} ({self.label}) is in progress"
        return (
            f"{self.kind} run {self.run_id} is in progress (cancel it first: POST /runs/{self.run_id}/cancel)"
        )


class Slot:
    """A job admitted but whose run is still being created; `start` hands it its run and task."""

    def __init__(self, jobs: Jobs, job: Job) -> None:
        self._jobs = jobs
        self.job = job

    def start(self, run_id: int, body: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        return self._jobs._start(self.job, run_id, body)


class Jobs:
    def __init__(self, hub: StateHub) -> None:
        self.hub = hub
        self._jobs: list[Job] = []
        self._no_switch = asyncio.Event()  # set while no switch (restart, rollback) holds the host
        self._no_switch.set()

    # -- what runs --------------------------------------------------------------------------------------

    def running(self, kind: JobKind | None = None) -> list[Job]:
        return [j for j in self._jobs if kind is None or j.kind is kind]

    def find(self, run_id: int) -> Job | None:
        return next((j for j in self._jobs if run_id in j.ids), None)

    @property
    def switching(self) -> bool:
        return bool(self.running(JobKind.SWITCH))

    async def no_switch(self) -> None:
        """Until no switch runs (at once if none does)."""
        await self._no_switch.wait()

    def _switches_changed(self) -> None:
        if self.switching:
            self._no_switch.clear()
        else:
            self._no_switch.set()

    def out_of_rotation(self) -> str | None:
        """Why /ready says 503 whatever the host's state: an experiment (or an isolated benchmark) runs, and
        production traffic must not pollute what it measures."""
        job = next((j for j in self._jobs if j.isolated and j.run_id), None)
        return f"{job.kind} {job.run_id}" if job is not None else None

    def conflict(self, kind: JobKind, *, parent: int | None = None, subject: str | None = None) -> str | None:
        """Why a job of `kind` cannot start now, or None."""
        if kind is JobKind.WARM:
            same = [j for j in self.running(JobKind.WARM) if j.subject == subject]
            return f"profile {subject!r} is being warmed already" if same else None
        if exclusive := [j for j in self._jobs if j.kind in EXCLUSIVE]:
            return exclusive[0].busy_text()
        if parent is not None and (kind is JobKind.SWITCH or self.find(parent) is not None):
            return None  # a job's own step, or a switch the serving watch asks for: ahead of the held job
        held = self._holder()
        return held.busy_text() if held else None

    def _holder(self) -> Job | None:
        """The benchmark or experiment that holds the host (its run may still be being created)."""
        return next((j for j in self._jobs if j.kind in HOLDS_HOST and j.parent is None), None)

    def busy_reason(self) -> str | None:
        """What an operator's switch would be refused for."""
        return self.conflict(JobKind.SWITCH)

    # -- admission --------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def admit(
        self,
        kind: JobKind,
        *,
        parent: int | None = None,
        subject: str | None = None,
        label: str = "",
        refuse_cancel: Callable[[int], str | None] = lambda _: None,
        on_cancel: Callable[[], None] = lambda: None,
        isolated: bool = False,
    ) -> Iterator[Slot]:
        """Check and hold the place in one step (no await between: atomic in one loop); a slot whose run
        was not started when the block ends (the run could not be created) is given up."""
        if why := self.conflict(kind, parent=parent, subject=subject):
            raise Busy(why)
        job = Job(
            kind,
            0,
            parent,
            subject,
            label,
            refuse_cancel=refuse_cancel,
            on_cancel=on_cancel,
            isolated=isolated,
        )
        self._jobs.append(job)
        self._switches_changed()
        try:
            yield Slot(self, job)
        finally:
            if job.task is None:
                self._jobs.remove(job)
                self._switches_changed()

    def _start(self, job: Job, run_id: int, body: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        job.run_id = run_id

        async def begin() -> Any:
            job.begun.set()
            return await body

        job.task = asyncio.create_task(begin())
        job.task.add_done_callback(lambda _: self._ended(job))
        return job.task

    def _ended(self, job: Job) -> None:
        with contextlib.suppress(ValueError):
            self._jobs.remove(job)
        self._switches_changed()
        self._publish()

    # -- progress and cancel ----------------------------------------------------------------------------

    def say(self, run_id: int, line: str) -> None:
        job = self.find(run_id)
        if job is not None:
            job.line = line
            self._publish()

    def _publish(self) -> None:
        held = self._holder()
        lines = sorted((j.run_id, j.line) for j in self._jobs if j.line)
        line = JobLine((held.run_id or None) if held else None, " | ".join(text for _, text in lines) or None)
        if line != self.hub.status.job_line:
            self.hub.set_job(line)

    def cancel(self, run_id: int) -> None:
        """The one cancel path: a job's own refusal, a second cancel, or a run that is not a job is said."""
        job = self.find(run_id)
        if job is None or job.task is None:
            raise WrongState(f"run {run_id} is not in progress")
        if why := job.refuse_cancel(run_id):
            raise Busy(why)
        if not job.begun.is_set():
            raise Busy(f"run {run_id} is starting: cancel again in a moment")
        if job.cancelling:
            raise Busy(f"run {run_id} is already being cancelled")
        job.cancelling = True
        log.info("run %d: cancel requested", run_id)
        job.on_cancel()
        job.task.cancel()

    async def wait(self, run_id: int) -> None:
        """Until the job that runs `run_id` (with whatever it carries on as) has ended."""
        job = self.find(run_id)
        if job is not None and job.task is not None:
            await asyncio.wait({job.task})

    async def stop(self, run_id: int) -> None:
        """A job's cancel by the job that started it (an experiment's benchmark): once its task has begun
        (Job.begun), then until it has ended."""
        job = self.find(run_id)
        if job is None or job.task is None:
            return
        await job.begun.wait()
        job.cancelling = True
        job.on_cancel()
        job.task.cancel()
        await asyncio.wait({job.task})

    async def close(self) -> None:
        """At shutdown the warms stop (their reader threads too); switches and benchmarks run to the end of
        the process."""
        for j in self.running(JobKind.WARM):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.stop(j.run_id)
