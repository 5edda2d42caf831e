"""Weights in the page cache before the engine asks for them. Residency of each profile's weight files is
scanned in the background (GET /profiles reads the last scan); a warm reads a profile's files with parallel
sequential readers, within a memory guard (MemAvailable minus a reserve: what does not fit is named, never
forced), at idle I/O priority while an engine serves. A warm is a run (kind `warm`), or part of a switch
(profile `warm = "on-switch"`); profiles with `warm = "always"` are warmed again when residency drops."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from daemon.core.profiles import Profile
from daemon.host.pagecache import FileResidency, PageCachePort

log = logging.getLogger("k25.warm")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Residency:
    files: int
    bytes: int
    resident: int
    scanned_at: float
    scan_s: float
    missing: tuple[str, ...] = ()  # roots that do not exist

    @property
    def percent(self) -> float:
        return 100.0 * self.resident / self.bytes if self.bytes else 100.0


@dataclass
class WarmResult:
    read: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # files the memory guard left out
    before: Residency | None = None
    after: Residency | None = None
    stopped: bool = False

    def describe(self) -> str:
        rate = self.read / MIB / self.seconds if self.seconds > 0 else 0.0
        text = f"read {self.read / MIB:.0f} MiB in {self.seconds:.1f}s ({rate:.0f} MiB/s)"
        if self.before and self.after:
            text += f"; residency {self.before.percent:.0f}% -> {self.after.percent:.0f}%"
        if self.skipped:
            text += f"; did not fit in memory (MemAvailable minus the reserve): {', '.join(self.skipped[:5])}"
            text += f" and {len(self.skipped) - 5} more" if len(self.skipped) > 5 else ""
        return text + ("; stopped" if self.stopped else "")


def roots(profile: Profile) -> list[str]:
    """The folders (or files) whose weights the engine reads: the model, and the drafter."""
    out = [profile.model]
    if profile.speculative is not None:
        out.append(profile.speculative.draft_model)
    return out


Progress = Callable[[int, int], Awaitable[None]]  # (bytes done, bytes to read)


class Warmer:
    def __init__(
        self,
        cache: PageCachePort,
        *,
        mem_available: Callable[[], int],
        reserve: int,
        workers: int,
        block: int,
    ) -> None:
        self.cache = cache
        self.mem_available = mem_available
        self.reserve = reserve
        self.workers = workers
        self.block = block
        self.latest: dict[str, Residency] = {}  # profile -> its newest scan

    def scan(self, profile: Profile) -> Residency:
        """Blocking: call through asyncio.to_thread."""
        return self._scan(profile)[0]

    def weights(self, profile: Profile) -> tuple[int, float]:
        """The weights' bytes and the share resident in the page cache. Blocking."""
        scan = self.scan(profile)
        return scan.bytes, scan.percent / 100.0

    def _scan(self, profile: Profile) -> tuple[Residency, list[FileResidency]]:
        """The profile's residency (kept as its latest), and each file's, which a warm plans with."""
        began = time.monotonic()
        files = [self.cache.residency(f) for f in self.cache.files(roots(profile))]
        missing = tuple(r for r in roots(profile) if not Path(r).exists())
        res = Residency(
            len(files),
            sum(f.size for f in files),
            sum(f.resident for f in files),
            time.time(),
            time.monotonic() - began,
            missing,
        )
        self.latest[profile.name] = res
        return res, files

    def _plan(self, files: list[FileResidency]) -> tuple[list[FileResidency], list[str]]:
        budget = self.mem_available() - self.reserve
        chosen, skipped = [], []
        for f in files:
            need = f.size - f.resident
            if need <= 0:
                continue
            if need > budget:
                skipped.append(Path(f.path).name)
                continue
            budget -= need
            chosen.append(f)
        return chosen, skipped

    async def warm(
        self, profile: Profile, *, idle_io: bool, progress: Progress, stop: threading.Event
    ) -> WarmResult:
        before, files = await asyncio.to_thread(self._scan, profile)
        result = WarmResult(before=before)
        chosen, result.skipped = self._plan(files)
        total = sum(f.size for f in chosen)
        loop = asyncio.get_running_loop()
        done = 0
        updates: asyncio.Queue[int] = asyncio.Queue()

        def report(n: int) -> None:
            loop.call_soon_threadsafe(updates.put_nowait, n)

        def read_all() -> int:
            with concurrent.futures.ThreadPoolExecutor(self.workers, thread_name_prefix="k25-warm") as pool:
                jobs = [
                    pool.submit(
                        self.cache.read_into_cache,
                        Path(f.path),
                        block=self.block,
                        idle_io=idle_io,
                        progress=report,
                        stop=stop,
                    )
                    for f in chosen
                ]
                return sum(j.result() for j in jobs)

        began = time.monotonic()
        reader = asyncio.ensure_future(asyncio.to_thread(read_all))
        step, next_report = max(total // 50, 1), 0
        try:
            while not reader.done() or not updates.empty():
                getter = asyncio.ensure_future(updates.get())
                await asyncio.wait({getter, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    continue
                done += getter.result()
                if done >= next_report or done >= total:
                    next_report = done + step
                    await progress(done, total)
            result.read = await reader
        except asyncio.CancelledError:
            stop.set()  # the readers stop at their next block
            await asyncio.wait({reader})
            raise
        finally:
            result.seconds = time.monotonic() - began
        result.stopped = stop.is_set()
        result.after = await asyncio.to_thread(self.scan, profile)
        return result
