"""Experiments at a time of low traffic, through systemd: `--at "Sat 03:00"` (any OnCalendar= expression) or
`--at +10min` makes a transient timer `k25-experiment-ID.timer` whose oneshot service runs `k25-ctl schedule
fire ID`; the daemon then starts the experiment, or records a `skipped` run when the host is busy, not
serving normally, or serves more than `max_running` requests. The request waits in the state folder."""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from daemon.core.errors import InvalidInput, K25Error, NotFound, UnitNotFound
from daemon.core.hoststate import HostState
from daemon.core.run_types import NewRun, Outcome, RunKind
from daemon.experiments.request import ExperimentRequest
from daemon.experiments.service import Experiments
from daemon.host.systemd import ActiveState
from daemon.host.timers import TimerPort, TimerSpec
from daemon.runs.jobs import JobKind, Jobs
from daemon.runs.recorder import RunRecorder

log = logging.getLogger("k25.schedules")
PREFIX = "k25-experiment-"
RELATIVE = re.compile(r"^\+\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hour)?$")
UNIT_S = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}


@dataclass(frozen=True)
class Schedule:
    id: int
    unit: str
    at: str
    max_running: int | None
    request: ExperimentRequest
    next_run: datetime | None = None  # None: it fired (a one-shot timer) or systemd no longer has it
    active: bool = False


class Schedules:
    def __init__(
        self,
        *,
        timers: TimerPort,
        folder: Path,
        command: list[str],
        benchmarks: Experiments,
        recorder: RunRecorder,
        jobs: Jobs,
        running_now: Callable[[], float | None],
    ) -> None:
        self.timers = timers
        self.folder = folder
        self.command = command
        self.benchmarks = benchmarks
        self.recorder = recorder
        self.jobs = jobs
        self.running_now = running_now

    async def schedule(self, req: ExperimentRequest, at: str, max_running: int | None) -> Schedule:
        """Validated as an experiment started now would be; nothing is written if systemd refuses `at`."""
        await self.benchmarks.check(req)
        on_calendar, on_active_s = _when(at)
        sid = await asyncio.to_thread(self._next_id)
        schedule = Schedule(sid, f"{PREFIX}{sid}.timer", at, max_running, req)
        await asyncio.to_thread(self._write, schedule)
        env = {k: v for k, v in os.environ.items() if k in ("K25_CONFIG", "K25_URL")} | {
            "PYTHONUNBUFFERED": "1"
        }
        what = f"k25-ctl experiment over {', '.join(req.profiles)} ({at})"
        argv = [*self.command, "schedule", "fire", str(sid)]
        spec = TimerSpec(f"{PREFIX}{sid}", what, argv, env, on_calendar, on_active_s)
        try:
            await self.timers.create(spec)
        except K25Error as e:
            await asyncio.to_thread(self._path(sid).unlink, missing_ok=True)
            raise InvalidInput(f"systemd refused the schedule {at!r}: {e}") from e
        log.info(
            "schedule %d: experiment over %s at %r (%s)", sid, ", ".join(req.profiles), at, schedule.unit
        )
        found = await self._with_timers([schedule], schedule.unit)
        return found[0] if found else schedule

    async def list(self) -> builtins.list[Schedule]:
        """The schedules systemd has a timer for (a one-shot timer that fired is gone with its file)."""
        return await self._with_timers(await asyncio.to_thread(self._read_all), f"{PREFIX}*.timer")

    async def _with_timers(self, schedules: builtins.list[Schedule], pattern: str) -> builtins.list[Schedule]:
        """Those of `schedules` whose timer systemd lists under `pattern`, with its next run."""
        timers = {t.unit: t for t in await self.timers.timers(pattern)}
        out = []
        for schedule in schedules:
            t = timers.get(schedule.unit)
            if t is None:
                continue
            nxt = datetime.fromtimestamp(t.next_elapse_us / 1e6, UTC) if t.next_elapse_us else None
            out.append(
                dataclasses.replace(schedule, next_run=nxt, active=t.active_state == ActiveState.ACTIVE)
            )
        return out

    async def cancel(self, sid: int) -> None:
        if not self._path(sid).exists():
            raise NotFound(f"no schedule {sid}")
        try:
            await self.timers.remove(f"{PREFIX}{sid}.timer")
        except UnitNotFound:
            pass  # it fired already: only its request is left
        await asyncio.to_thread(self._path(sid).unlink, missing_ok=True)
        log.info("schedule %d: cancelled", sid)

    async def fire(self, sid: int) -> int:
        """The timer's service calls this: the experiment's run id, or the id of a `skipped` run."""
        schedule = await asyncio.to_thread(self._read, sid)
        if _when(schedule.at)[1] is not None:  # a one-shot: its timer is gone after this
            await asyncio.to_thread(self._path(sid).unlink, missing_ok=True)
        if why := self._why_not(schedule):
            return await self._skipped(schedule, why)
        try:
            run_id = await self.benchmarks.experiment(schedule.request)
        except K25Error as e:
            return await self._skipped(schedule, str(e))
        log.info("schedule %d: experiment run %d started", sid, run_id)
        return run_id

    def _why_not(self, schedule: Schedule) -> str | None:
        st = self.recorder.hub.status
        if busy := self.jobs.conflict(JobKind.EXPERIMENT):
            return f"the host is busy: {busy}"
        if st.state not in (HostState.ACTIVE, HostState.IDLE):
            return f"the host is {st.state}: {st.reason or 'not serving normally'}"
        running = self.running_now()
        if schedule.max_running is not None and running is not None and running > schedule.max_running:
            return (
                f"the engine serves {running:.0f} requests (more than max_running = {schedule.max_running})"
            )
        return None

    async def _skipped(self, schedule: Schedule, why: str) -> int:
        st = self.recorder.hub.status
        run_id = await self.recorder.create(NewRun(RunKind.EXPERIMENT, None, st.active_profile))
        reason = f"schedule {schedule.id} ({schedule.at}) skipped: {why}"
        await self.recorder.finish(run_id, Outcome.SKIPPED, error=reason)
        return run_id

    # -- the requests, one file each in the state folder ------------------------------------------------

    def _path(self, sid: int) -> Path:
        return self.folder / f"{sid}.json"

    def _next_id(self) -> int:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        used = [int(p.stem) for p in self.folder.glob("*.json") if p.stem.isdigit()]
        return max(used, default=0) + 1

    def _write(self, s: Schedule) -> None:
        data = {"id": s.id, "at": s.at, "max_running": s.max_running, "request": s.request.model_dump()}
        self._path(s.id).write_text(json.dumps(data))

    def _read(self, sid: int) -> Schedule:
        try:
            data = json.loads(self._path(sid).read_text())
        except FileNotFoundError as e:
            raise NotFound(f"no schedule {sid}") from e
        req = ExperimentRequest.model_validate(data["request"])
        return Schedule(sid, f"{PREFIX}{sid}.timer", data["at"], data.get("max_running"), req)

    def _read_all(self) -> builtins.list[Schedule]:
        files = sorted(self.folder.glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0)
        return [self._read(int(p.stem)) for p in files if p.stem.isdigit()]


def _when(at: str) -> tuple[str | None, float | None]:
    """`+N[s|min|h]`: from now (OnActiveSec=); anything else is an OnCalendar= expression for systemd."""
    at = at.strip()
    if not at:
        raise InvalidInput("at: give an OnCalendar= expression ('Sat 03:00') or a delay ('+10min')")
    if m := RELATIVE.match(at):
        return None, float(m.group(1)) * UNIT_S[m.group(2)]
    if at.startswith("+"):
        raise InvalidInput(f"at: {at!r} is not a delay like '+30s', '+10min' or '+2h'")
    return at, None
