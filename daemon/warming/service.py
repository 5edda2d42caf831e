"""Warms as runs: `POST /profiles/{name}/warm` (kind `warm`, progress in MiB over SSE, cancellable), the
warm a switch does for a `warm = "on-switch"` profile (events of the switch run, stage `warm`), and the
background residency scan that keeps `GET /profiles` current and re-warms `warm = "always"` profiles."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable

from daemon.core.errors import Busy
from daemon.core.hoststate import HostState
from daemon.core.profiles import Profile, ProfileSet, WarmMode
from daemon.core.run_types import NewRun, Outcome, Phase, Progress, RunKind
from daemon.runs.jobs import JobKind, Jobs
from daemon.runs.recorder import RunRecorder
from daemon.warming.warmer import MIB, Residency, Warmer, WarmResult

log = logging.getLogger("k25.warm")
Stage = Callable[[str, float], Awaitable[None]]


class WarmService:
    def __init__(
        self,
        warmer: Warmer,
        recorder: RunRecorder,
        jobs: Jobs,
        profiles: Callable[[], ProfileSet],
        *,
        every_s: float,
        always_below: float,
    ) -> None:
        self.warmer = warmer
        self.recorder = recorder
        self.jobs = jobs
        self.profiles = profiles
        self.every_s = every_s
        self.always_below = always_below
        self._loop: asyncio.Task[None] | None = None

    def residency(self) -> dict[str, Residency]:
        return dict(self.warmer.latest)

    def _profile(self, name: str) -> Profile:
        return self.profiles().require(name).profile

    async def start(self, name: str) -> int:
        """A warm run for the profile; 409 while one runs for it already."""
        p = self._profile(name)
        stop = threading.Event()  # the reader threads stop with the task
        with self.jobs.admit(JobKind.WARM, subject=name, on_cancel=stop.set) as slot:
            run_id = await self.recorder.create(NewRun(RunKind.WARM, name))
            slot.start(run_id, self._run(run_id, p, stop))
            return run_id

    async def _progress(self, run_id: int, done: int, total: int) -> None:
        pct = 100 * done // total if total else 100
        await self.recorder.event(
            run_id,
            Phase.WARMING,
            f"{done / MIB:.0f}/{total / MIB:.0f} MiB",
            progress=Progress(pct, done // MIB, total // MIB),
        )

    async def _warm(self, run_id: int, p: Profile, stop: threading.Event, *, idle_io: bool) -> WarmResult:
        how = " at idle I/O priority (an engine serves)" if idle_io else ""
        await self.recorder.event(
            run_id, Phase.WARMING, f"reading {p.name}'s weight files into the page cache{how}"
        )
        return await self.warmer.warm(
            p, idle_io=idle_io, progress=lambda d, t: self._progress(run_id, d, t), stop=stop
        )

    async def _run(self, run_id: int, p: Profile, stop: threading.Event) -> None:
        idle_io = self.recorder.hub.status.state in (HostState.ACTIVE, HostState.SWITCHING)
        try:
            result = await self._warm(run_id, p, stop, idle_io=idle_io)
        except asyncio.CancelledError:
            await self.recorder.finish(run_id, Outcome.CANCELLED, detail="cancelled by request")
            return
        except Exception as e:
            log.exception("run %d: warm failed", run_id)
            await self.recorder.finish(run_id, Outcome.FAILED, error=f"{type(e).__name__}: {e}")
            return
        await self.recorder.finish(run_id, Outcome.OK, detail=result.describe())

    async def before_start(self, run_id: int, p: Profile, stage: Stage) -> None:
        """A switch's own warm (profile `warm` on-switch or always), while the old engine stops: its time is
        the run's `warm` stage. A failed warm is said, never fatal: the engine reads from disk."""
        try:
            result = await self._warm(run_id, p, threading.Event(), idle_io=False)
        except Exception as e:
            log.exception("run %d: warm before the start failed", run_id)
            await self.recorder.event(
                run_id, Phase.WARMING, f"warm failed ({type(e).__name__}: {e}); going on"
            )
            return
        await self.recorder.event(run_id, Phase.WARMING, result.describe())
        await stage("warm", result.seconds)

    def start_refresh(self) -> None:
        self._loop = asyncio.create_task(self._refresh())

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def _refresh(self) -> None:
        """Each profile's residency every `every_s` (the scan is a few mincore calls per file); profiles
        with warm = "always" below the threshold are warmed again."""
        while True:
            for name, lp in sorted(self.profiles().valid.items()):
                try:
                    res = await asyncio.to_thread(self.warmer.scan, lp.profile)
                except OSError as e:
                    log.warning("residency of %s: %s", name, e)
                    continue
                if (
                    lp.profile.warm is WarmMode.ALWAYS
                    and res.bytes
                    and res.resident < self.always_below * res.bytes
                ):
                    with contextlib.suppress(Busy):
                        run_id = await self.start(name)
                        log.info(
                            "run %d: %s at %.0f%% resident (warm = always): warming",
                            run_id,
                            name,
                            res.percent,
                        )
            await asyncio.sleep(self.every_s)  # a period, not an event: residency changes silently
