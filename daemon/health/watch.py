"""The GPU health watch: reads every GPU's health each `every_s` (counters have no event), takes the
driver's events from NVML's event set and from the kernel log as they come, records each once, and keeps
every GPU's state current for /status, /gpus, the metrics and the switch's gate. One journal line per
event and per change of state."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import replace

from daemon.core.hoststate import GpuHealthLine, StateHub
from daemon.health.assess import DUPLICATE_WITHIN_S, Health, Mark, combine, duplicate, live_reasons, mark_for
from daemon.health.kernel_log import parse
from daemon.health.xid import Action, lookup
from daemon.host.gpu import GpuUnavailable
from daemon.host.gpu_health import DriverEvent, GpuHealthPort, HealthReading
from daemon.host.journal import JournalRecord
from daemon.store.gpu_health import GpuHealthStore
from daemon.store.models import GpuMark
from daemon.teardown.report import ProcessOutcome

log = logging.getLogger("k25.gpu")
RECENT_S = 30.0  # events kept in memory to match duplicates and attribute crashes
KernelFollow = Callable[[], AbstractAsyncContextManager[AsyncIterator[JournalRecord]]]


class HealthWatch:
    def __init__(
        self,
        *,
        port: GpuHealthPort,
        kernel: KernelFollow | None,
        store: GpuHealthStore,
        hub: StateHub,
        every_s: float,
        attribution_s: float,
    ) -> None:
        self.port = port
        self.kernel = kernel
        self.store = store
        self.hub = hub
        self.every_s = every_s
        self.attribution_s = attribution_s
        self.readings: dict[int, HealthReading] = {}
        self.read_s: float | None = None  # how long the last reading of all GPUs took
        self.read_error: str | None = None
        self.registration = ""  # what the driver's event source took (NVML may refuse event types)
        self.marks: dict[int, list[Mark]] = {}
        self.states: dict[int, tuple[Health, list[str]]] = {}
        self.live: dict[int, Health] = {}  # what the readings alone say (a reset is verified by them)
        self.xids: Counter[tuple[int, int]] = Counter()
        self.recent: list[tuple[int, DriverEvent]] = []  # (row id, event), newest last
        self._ecc: dict[int, int] = {}
        self._ecc_rise: dict[int, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._waiter = ThreadPoolExecutor(1, thread_name_prefix="gpu-events")
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._changed = asyncio.Condition()
        # GPUs an Xid asked to reset (NVIDIA's action RESET_GPU), for an automatic reset where it is on.
        self.resets_wanted: asyncio.Queue[tuple[int, str]] = asyncio.Queue()

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        for row in await asyncio.to_thread(self.store.marks):
            self.marks.setdefault(row.gpu, []).append(Mark(Health(row.state), row.reason, row.at, row.xid))
        self.xids = await asyncio.to_thread(self.store.xid_counts)
        await self.read()
        self.registration = registration = await asyncio.to_thread(self.port.registration)
        log.info(
            "GPU health: %d GPUs read in %.0f ms; events: %s",
            len(self.readings),
            (self.read_s or 0) * 1e3,
            registration,
        )
        self._tasks = [asyncio.create_task(self._read_loop()), asyncio.create_task(self._driver_events())]
        if self.kernel is not None:
            self._tasks.append(asyncio.create_task(self._kernel_lines(self.kernel)))

    async def close(self) -> None:
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        # The port is closed on the waiter's own thread, after the wait in progress (a second at most):
        # never under a wait, and never blocking the loop.
        self._waiter.submit(self.port.close)
        self._waiter.shutdown(wait=False)

    # -- readings --------------------------------------------------------------------------------------

    async def read(self) -> None:
        began = time.monotonic()
        try:
            readings = await asyncio.to_thread(self.port.read)
            self.read_error = None
        except GpuUnavailable as e:
            self.read_error = str(e)
            return
        self.read_s = time.monotonic() - began
        now = time.time()
        for r in readings:
            corrected = r.values.get("ecc_volatile_corrected")
            if isinstance(corrected, int):
                before = self._ecc.get(r.index)
                if before is not None and corrected > before:
                    grown = corrected - before + self._ecc_rise.get(r.index, (0, now))[0]
                    self._ecc_rise[r.index] = (grown, now)
                    log.warning("GPU %d: corrected ECC errors %d -> %d", r.index, before, corrected)
                self._ecc[r.index] = corrected
            was = self.readings.get(r.index)
            if r.lost and not (was and was.lost):
                await self.record(
                    DriverEvent(
                        now,
                        "k25-ctl",
                        0,
                        r.index,
                        r.bus_id or None,
                        kind="lost",
                        message="NVML reports the GPU lost",
                    )
                )
        self.readings = {r.index: r for r in readings}
        await self._assess()

    async def _read_loop(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.every_s)  # counters and link state have no event: read them on a clock
            try:
                await self.read()
            except Exception:
                log.exception("GPU health reading failed")

    # -- events ----------------------------------------------------------------------------------------

    async def _driver_events(self) -> None:
        # The wait blocks in NVML (or on the FIFO) a second at a time, always: a thread of its own, so that
        # it never holds one of the default pool's few threads that every other blocking call shares.
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            try:
                events = await loop.run_in_executor(self._waiter, self.port.events, 1.0)
            except GpuUnavailable as err:
                log.error("GPU events: %s; events from the kernel log only", err)
                return
            for event in events:
                await self.record(replace(event, bus_id=event.bus_id or self._bus(event.gpu)))

    async def _kernel_lines(self, kernel: KernelFollow) -> None:
        async with kernel() as records:
            async for rec in records:
                line = parse(rec.message)
                if line is None:
                    continue
                gpu = next((r.index for r in self.readings.values() if r.bus_id == line.bus_id), None)
                await self.record(
                    DriverEvent(
                        rec.timestamp or time.time(),
                        "kernel",
                        line.code,
                        gpu,
                        line.bus_id,
                        line.pid,
                        line.message,
                    )
                )

    def _bus(self, gpu: int | None) -> str | None:
        r = self.readings.get(gpu) if gpu is not None else None
        return r.bus_id if r and r.bus_id else None

    async def record(self, e: DriverEvent) -> None:
        """One event: stored once (the other source's copy merges into it), logged, its mark left."""
        async with self._lock:
            now = time.time()
            self.recent = [(i, r) for i, r in self.recent if now - r.at <= RECENT_S]
            same = duplicate(e, [r for _, r in self.recent])
            if same is not None:
                row = next(i for i, r in self.recent if r is same)
                await asyncio.to_thread(self.store.merge_source, row, e)
                return
            row = await asyncio.to_thread(self.store.add_event, e)
            self.recent.append((row, e))
            if e.kind == "xid" and e.gpu is not None:
                self.xids[(e.gpu, e.code)] += 1
            mark = mark_for(e)
            if mark is not None and e.gpu is not None:
                kept = GpuMark(
                    gpu=e.gpu, state=mark.state.value, reason=mark.reason, at=mark.at, xid=mark.xid
                )
                await asyncio.to_thread(self.store.add_mark, kept)
                self.marks.setdefault(e.gpu, []).append(mark)
            log.warning("%s", self.describe(e, mark))
            if e.kind == "xid" and e.gpu is not None and lookup(e.code).action is Action.RESET_GPU:
                self.resets_wanted.put_nowait((e.gpu, lookup(e.code).describe()))
        await self._assess()

    @staticmethod
    def describe(e: DriverEvent, mark: Mark | None) -> str:
        where = f"GPU {e.gpu}" if e.gpu is not None else f"GPU at {e.bus_id or '?'}"
        what = lookup(e.code).describe() if e.kind == "xid" else e.message
        who = f", pid {e.pid}" if e.pid else ""
        kind = f"Xid {e.code}" if e.kind == "xid" else e.kind
        after = f"; the GPU is now {mark.state}" if mark else "; recorded, no change to its health"
        return f"{where}: {kind} ({e.source}{who}): {what}{after}"

    # -- state -----------------------------------------------------------------------------------------

    async def _assess(self) -> None:
        now = time.time()
        states = {}
        for i in sorted(set(self.readings) | set(self.marks)):
            reading = self.readings.get(i)
            live = live_reasons(reading, self._ecc_rise.get(i), now) if reading else []
            self.live[i] = combine([], live)[0]
            states[i] = combine(self.marks.get(i, []), live)
        for i, (state, reasons) in states.items():
            old = self.states.get(i, (Health.HEALTHY, []))[0]
            if state is not old:
                log.warning("GPU %d: %s -> %s (%s)", i, old, state, "; ".join(reasons) or "clean")
        self.states = states
        self.hub.gpu_health(tuple(GpuHealthLine(i, s.value, tuple(r)) for i, (s, r) in states.items()))
        async with self._changed:
            self._changed.notify_all()

    async def recent_events(self, limit: int) -> list[DriverEvent]:
        return await asyncio.to_thread(self.store.events, limit)

    def live_state(self, gpu: int) -> Health:
        return self.live.get(gpu, Health.HEALTHY)

    def state(self, gpu: int) -> Health:
        return self.states.get(gpu, (Health.HEALTHY, []))[0]

    def blocked(self, gpus: list[int]) -> str | None:
        """Why an engine must not start on `gpus` (any of them needs a reset), or None."""
        bad = [(g, self.states[g][1]) for g in gpus if self.state(g) is Health.NEEDS_RESET]
        if not bad:
            return None
        return "; ".join(f"GPU {g} needs a reset: {reasons[0]}" for g, reasons in bad)

    async def cause(self, gpus: list[int], ended: float, wait_s: float = 0.0) -> str | None:
        """The hardware event that most likely ended an engine on `gpus` at `ended`: the newest Xid on one
        of them within the attribution window before, that is not an application's own fault; else a GPU
        lost or a holder stuck. Waits up to `wait_s` for an Xid (the kernel log's line can arrive after
        systemd saw the exit, and after NVML already lost the GPU)."""
        deadline = time.monotonic() + (wait_s if self.readings else 0.0)  # no GPU read: no event to come
        while (found := self._cause(gpus, ended, xid=True)) is None and (
            left := deadline - time.monotonic()
        ) > 0:
            await self.changed(left)
        return found or self._cause(gpus, ended, xid=False)

    def _cause(self, gpus: list[int], ended: float, *, xid: bool) -> str | None:
        for _, e in reversed(self.recent):
            if e.gpu not in gpus or not (-DUPLICATE_WITHIN_S <= ended - e.at <= self.attribution_s):
                continue
            if (e.kind == "xid") is not xid or (e.kind == "xid" and lookup(e.code).application):
                continue
            at = time.strftime("%H:%M:%S", time.localtime(e.at))
            if e.kind == "xid":
                return f"Xid {e.code} on GPU {e.gpu} at {at}, {lookup(e.code).describe().split(', ', 1)[1]}"
            return f"{e.kind} on GPU {e.gpu} at {at}: {e.message}"
        return None

    async def stuck(self, run_id: int, holders: list[ProcessOutcome]) -> None:
        """Holders that survived SIGKILL (D state, in the driver): each of their GPUs needs a reset."""
        for o in holders:
            for gpu in o.gpus:
                text = (
                    f"pid {o.pid} ({o.title[:60]}) survived SIGKILL in state {o.state or '?'}, wchan "
                    f"{o.wchan or '?'} (run {run_id}): only a GPU reset or a reboot frees GPU {gpu}"
                )
                await self.record(
                    DriverEvent(time.time(), "k25-ctl", 0, gpu, self._bus(gpu), o.pid, text, "d_state")
                )

    async def clear(self, gpus: list[int], run_id: int) -> int:
        """A verified reset or an acknowledgement: the marks on `gpus` go (recorded with `run_id`)."""
        n = await asyncio.to_thread(self.store.clear, gpus, time.time(), run_id)
        for g in gpus:
            self.marks.pop(g, None)
            self._ecc_rise.pop(g, None)
        log.warning("run %d: GPU health marks cleared on GPUs %s (%d marks)", run_id, gpus, n)
        await self._assess()
        return n

    async def changed(self, timeout_s: float) -> None:
        """Waits for the next assessment (tests of the watch, the CLI's --wait)."""
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
