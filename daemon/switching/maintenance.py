"""The maintenance teardown (POST /teardown, `k25-ctl teardown`): when no engine should run, kill what
still holds the GPUs and clean /dev/shm, as a job of the one registry (a switch asked for meanwhile gets
409 naming it, and /status's job line shows it). Parked engines are spared, as in a switch's teardown."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from daemon.core.errors import Busy
from daemon.core.hoststate import HostState, StateHub
from daemon.core.run_types import NewRun, Outcome, RunKind
from daemon.health.gate import GpuGate
from daemon.runs.jobs import JobKind, Jobs
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import Parked, TeardownPlan
from daemon.teardown.report import TeardownReport

log = logging.getLogger("k25.teardown")
# The states in which no engine should run: only then may a maintenance teardown kill engine processes.
ENGINELESS = (HostState.IDLE, HostState.FAILED, HostState.DEGRADED)


class MaintenanceTeardown:
    def __init__(
        self,
        *,
        teardown: Teardown,
        recorder: RunRecorder,
        jobs: Jobs,
        units: Callable[[], tuple[str, ...]],
        spared: Callable[[], Awaitable[tuple[Parked, ...]]],
        gpus: GpuGate,
    ) -> None:
        self.teardown = teardown
        self.gpus = gpus  # a holder that survives SIGKILL marks its GPUs needs_reset
        self.recorder = recorder
        self.jobs = jobs
        self.hub: StateHub = recorder.hub
        self._units = units
        self._spared = spared

    async def plan(self) -> TeardownPlan:
        """The dry run: what a teardown would signal and remove now."""
        return await self.teardown.plan(managed_units=self._units(), parked=await self._spared())

    async def run(self) -> tuple[int, TeardownReport]:
        """Admitted (409 while a switch, unpark, benchmark or experiment runs), then run to its end."""
        st = self.hub.status
        if st.state not in ENGINELESS:
            raise Busy(f"the host is {st.state}: stop the engine (or switch) instead")
        with self.jobs.admit(JobKind.TEARDOWN, label="maintenance teardown") as slot:
            run_id = await self.recorder.create(NewRun(RunKind.TEARDOWN, profile=None))
            task = slot.start(run_id, self._run(run_id))
        report: TeardownReport = await task
        return run_id, report

    async def _run(self, run_id: int) -> TeardownReport:
        self.jobs.say(run_id, f"teardown run {run_id}: killing what holds the GPUs")
        log.info("run %d: maintenance teardown", run_id)
        report = await self.teardown.run(managed_units=self._units(), parked=await self._spared())
        await self.recorder.teardown(run_id, report)
        if report.needs_reset:
            await self.gpus.stuck(run_id, report.needs_reset)
        host = HostAfter(HostState.NEEDS_RESET, None, report.error) if report.needs_reset else None
        outcome = Outcome.OK if report.ok else Outcome.FAILED
        await self.recorder.finish(run_id, outcome, error=report.error, host=host)
        return report
