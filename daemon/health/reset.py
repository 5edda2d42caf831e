"""A GPU reset planned like a teardown (`k25-ctl gpus reset`): the plan first (the engines it stops, the
processes that hold the GPUs, the command it runs), refused while a process k25-ctl does not manage holds
them unless forced; then the engines stopped, the teardown, the reset command, the health read again, and
the GPUs' marks cleared only when the readings are clean. And the operator's acknowledgement, which clears
marks without a reset. Both are runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from daemon.core.errors import K25Error, Refused
from daemon.core.hoststate import HostState
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.health.assess import Health
from daemon.health.watch import HealthWatch
from daemon.host.engine_cli import EngineCli
from daemon.host.systemd import SystemdPort, UnitState
from daemon.runs.jobs import JobKind, Jobs
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import Victim

log = logging.getLogger("k25.gpu")


@dataclass(frozen=True)
class ResetCommand:
    argv: tuple[str, ...]
    scope: str  # board | gpu
    timeout_s: float

    def for_gpus(self, gpus: list[int]) -> list[str]:
        ids = ",".join(map(str, gpus))
        argv = [a.replace("{gpus}", ids) for a in self.argv]
        if self.scope == "gpu" and not any("{gpus}" in a for a in self.argv):
            argv += ["-i", ids]  # nvidia-smi's way to name the GPUs
        return argv


@dataclass(frozen=True)
class ResetPlan:
    gpus: list[int]
    engines: list[str]  # the running engine units it stops
    holders: list[Victim]  # what holds the GPUs now (the teardown's victims)
    command: list[str]
    refused: str | None  # why it would not run now (a foreign holder; forced, it kills it)


class GpuService:
    def __init__(
        self,
        *,
        health: HealthWatch,
        teardown: Teardown,
        systemd: SystemdPort,
        recorder: RunRecorder,
        jobs: Jobs,
        managed_units: Callable[[], tuple[str, ...]],
        unit_states: Callable[[], Mapping[str, UnitState]],
        cli: EngineCli,
        env: Mapping[str, str],
        command: ResetCommand,
        stop_timeout_s: float,
        automatic: bool = False,
    ) -> None:
        self.health = health
        self.teardown = teardown
        self.systemd = systemd
        self.recorder = recorder
        self.jobs = jobs
        self.managed_units = managed_units
        self.unit_states = unit_states
        self.cli = cli  # runs the reset command (blocking: in a thread)
        self.env = env
        self.command = command
        self.stop_timeout_s = stop_timeout_s
        self.automatic = automatic  # reset a GPU when an Xid asks for it (gpu_reset_automatic)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.automatic:
            self._task = asyncio.create_task(self._reset_when_asked())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _reset_when_asked(self) -> None:
        """gpu_reset_automatic: each Xid whose NVIDIA action is RESET_GPU starts a reset of its GPU (of the
        board, on an NVSwitch system), planned and refused like one asked for by hand."""
        while True:
            gpu, why = await self.health.resets_wanted.get()
            if self.health.state(gpu) is not Health.NEEDS_RESET:
                continue  # reset meanwhile
            try:
                run_id = await self.reset([gpu])
            except K25Error as e:
                log.error("GPU %d: automatic reset not started (%s): %s", gpu, why, e)
                continue
            log.warning("run %d: GPU %d reset automatically after %s (gpu_reset_automatic)", run_id, gpu, why)
            await self.jobs.wait(run_id)

    def _gpus(self, asked: list[int] | None) -> list[int]:
        every = sorted(self.health.readings) or sorted(self.health.states)
        if unknown := sorted(set(asked or ()) - set(every)):
            raise Refused(f"no GPU {unknown}: this host has GPUs {every}")
        return every if self.command.scope == "board" or not asked else sorted(set(asked))

    async def plan(self, asked: list[int] | None, *, force: bool = False) -> ResetPlan:
        gpus = self._gpus(asked)
        engines = [u for u, st in self.unit_states().items() if not st.is_down and u in self.managed_units()]
        p = await self.teardown.plan(tuple(gpus), managed_units=self.managed_units(), full=False)
        foreign = [v for v in p.victims if v.foreign]
        refused = None
        if foreign and not force:
            names = ", ".join(f"pid {v.pid} ({v.title[:60]})" for v in foreign)
            refused = (
                f"a process k25-ctl does not manage holds the GPUs: {names}; stop it, or force the reset"
            )
        return ResetPlan(gpus, sorted(engines), list(p.victims), self.command.for_gpus(gpus), refused)

    async def reset(self, asked: list[int] | None, *, force: bool = False) -> int:
        """The reset as a run (its id); Refused with the plan's reason where it may not run."""
        plan = await self.plan(asked, force=force)
        if plan.refused:
            raise Refused(plan.refused)
        with self.jobs.admit(JobKind.TEARDOWN, label=f"GPU reset {plan.gpus}") as slot:
            run_id = await self.recorder.create(NewRun(RunKind.GPU_RESET, profile=None))
            slot.start(run_id, self._reset(run_id, plan))
        return run_id

    async def _reset(self, run_id: int, plan: ResetPlan) -> None:
        what = f"GPUs {plan.gpus}: stop {plan.engines or 'no engine'}, then {' '.join(plan.command)}"
        await self.recorder.event(run_id, Phase.CREATED, what)
        for unit in plan.engines:
            out = await self.systemd.stop(unit, within_s=self.stop_timeout_s)
            await self.recorder.event(run_id, Phase.STOP, f"stopped {unit}: job {out.job_result}")
        report = await self.teardown.run(tuple(plan.gpus), managed_units=self.managed_units())
        await self.recorder.teardown(run_id, report)
        answer = await asyncio.to_thread(self.cli.run, plan.command, self.env, self.command.timeout_s)
        said = (answer.out + answer.err).strip().splitlines()[-3:]
        await self.recorder.event(
            run_id, Phase.RESET, f"{' '.join(plan.command)}: exit {answer.rc}; {' / '.join(said)}"
        )
        await self.health.read()
        left = [
            f"GPU {g}: {'; '.join(self.health.states[g][1])}"
            for g in plan.gpus
            if g in self.health.states and self._still_bad(g)
        ]
        if answer.rc != 0 or left:
            why = f"the reset command failed (exit {answer.rc})" if answer.rc != 0 else "readings not clean"
            error = f"{why}: {'; '.join(left) or ' / '.join(said)}; the GPUs' health is kept"
            await self.recorder.finish(run_id, Outcome.FAILED, error=error)
            return
        cleared = await self.health.clear(plan.gpus, run_id)
        host = self._host_after()
        detail = f"GPUs {plan.gpus} reset; readings clean; {cleared} health marks cleared"
        await self.recorder.finish(run_id, Outcome.OK, detail=detail, host=host)

    def _host_after(self) -> HostAfter | None:
        """A host that needed a reset (a teardown's D-state holder) is idle once its GPUs are vouched for."""
        return HostAfter(HostState.IDLE) if self.recorder.hub.status.state is HostState.NEEDS_RESET else None

    def _still_bad(self, gpu: int) -> bool:
        """After a reset, what the readings show now (the marks are the past the reset answers)."""
        reading = self.health.readings.get(gpu)
        return reading is None or reading.lost or self.health.live_state(gpu) is not Health.HEALTHY

    async def acknowledge(self, asked: list[int] | None, note: str) -> int:
        """The operator's word that the GPUs are fine (say, after a reboot k25-ctl did not see): the marks
        go, recorded as a run with the note."""
        gpus = sorted(set(asked)) if asked else sorted(self.health.marks)
        run_id = await self.recorder.create(NewRun(RunKind.GPU_ACK, profile=None))
        reasons = [r for g in gpus for r in self.health.states.get(g, (Health.HEALTHY, []))[1]]
        cleared = await self.health.clear(gpus, run_id)
        said = "; ".join(reasons) or "none"
        detail = f"acknowledged GPUs {gpus} ({note or 'no note'}): {cleared} marks cleared: {said}"
        host = self._host_after()
        await self.recorder.finish(run_id, Outcome.OK, detail=detail, host=host)
        return run_id
