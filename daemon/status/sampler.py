"""The shared host sampler: reads are served from what it last saw, never from an NVML or /proc read per
request. GPUs every `gpu_sample_s` and at once when a switch or wake settles (the host's state leaves
`switching`: the new engine's memory shows then, not up to an interval later), stray engine processes
every `strays_sample_s`; the engine units' states come from the serving watch's followers (systemd's own
change events)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from daemon.core.hoststate import HostState, StateHub
from daemon.host.gpu import GpuInfo, GpuUnavailable, GpuView
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import Victim

log = logging.getLogger("k25.sampler")
MAINTAIN_EVERY_S = 3600.0


class HostSampler:
    def __init__(
        self,
        gpus: GpuView,
        teardown: Teardown,
        managed_units: Callable[[], tuple[str, ...]],
        hub: StateHub,
        *,
        gpu_every_s: float,
        strays_every_s: float,
        maintenance: Callable[[], Awaitable[None]] | None = None,
        ledger: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.view = gpus
        self.teardown = teardown
        self.managed_units = managed_units
        self.gpu_every_s = gpu_every_s
        self.strays_every_s = strays_every_s
        self.hub = hub
        self.gpus: list[GpuInfo] = []
        self.gpu_error: str | None = None
        self.gpus_at: float | None = None  # when the GPUs were last read (epoch seconds)
        self._settled = asyncio.Event()  # a switch or wake has just ended
        self.strays: list[Victim] = []
        self.maintenance = maintenance  # hourly: retention of runs and metric rows
        self.ledger = ledger  # after each GPU sample: the host RAM each engine holds
        self._tasks: list[asyncio.Task[None]] = []

    async def sample_gpus(self) -> None:
        try:
            self.gpus = await asyncio.to_thread(self.view.gpus)
            self.gpu_error = None
        except GpuUnavailable as e:
            self.gpus = []
            self.gpu_error = str(e)
        self.gpus_at = time.time()

    async def sample_strays(self) -> None:
        plan = await self.teardown.plan(managed_units=self.managed_units(), full=False)
        known = {v.pid for v in self.strays}
        self.strays = [v for v in plan.victims if v.foreign]
        for v in self.strays:
            if v.pid not in known:  # each stray once, when it first shows
                log.warning(
                    "stray engine process pid %d (%s): %s; not killed",
                    v.pid,
                    v.title[:80],
                    "; ".join(v.reasons),
                )

    async def start(self) -> None:
        await self.sample_gpus()
        await self.sample_strays()
        self._tasks = [asyncio.create_task(self._run()), asyncio.create_task(self._follow_switches())]

    async def _follow_switches(self) -> None:
        switching = False
        async for st in self.hub.subscribe():
            if switching and st.state is not HostState.SWITCHING:
                self._settled.set()
            switching = st.state is HostState.SWITCHING

    async def _run(self) -> None:
        strays_at, maintained = time.monotonic(), 0.0
        while True:
            # NVML has no change event: sampling is the only way; a switch's end is one worth not waiting for.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), self.gpu_every_s)
            self._settled.clear()
            try:
                await self.sample_gpus()
                if self.ledger is not None:
                    await self.ledger()
                now = time.monotonic()
                if now - strays_at >= self.strays_every_s:
                    strays_at = now
                    await self.sample_strays()
                if self.maintenance is not None and (not maintained or now - maintained >= MAINTAIN_EVERY_S):
                    maintained = now
                    await self.maintenance()
            except Exception:  # a failed sample keeps the last one; the next try comes anyway
                log.exception("host sample failed")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
