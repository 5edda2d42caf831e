"""Finding what blocks the event loop: every callback the loop runs (a task's step, a handle) is timed, and
one that runs past a threshold is reported with what it was and where it was when a watcher thread looked
(the main thread's stack while the step still ran: the blocking call itself). asyncio's own debug mode
reports slow callbacks too, but it captures a traceback for every handle it creates, which makes the
steps it measures slow; this costs two clock and two getrusage reads a callback. A step's time is its own:
where the loop's thread never waited of its own accord (no voluntary context switch: no blocking call, no
lock) the step's time is the CPU time it used, so a busy machine that preempts the thread (other processes
on the same cores) does not make a fast step look slow; where it did wait, the wall-clock time counts,
since that wait is the blocking call the guard is for. The garbage collector's pauses within a step are the
interpreter's, not the step's code: they are taken off its time (and named where it is reported). For
diagnosis (`slow_callback_ms`) and the API tests' guard, never on by default."""

from __future__ import annotations

import asyncio
import gc
import resource
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

Report = Callable[["SlowStep"], None]


@dataclass(frozen=True)
class SlowStep:
    seconds: float  # without the garbage collector's pauses
    what: str  # the task (its coroutine and where it is now) or the callback
    blocked_in: str  # the innermost frames seen while it ran (empty: it ended before the watcher looked)
    gc_s: float = 0.0  # the garbage collector's pauses within the step

    def __str__(self) -> str:
        where = f"; while running: {self.blocked_in}" if self.blocked_in else ""
        gc = f" (and {self.gc_s * 1000:.0f} ms of garbage collection)" if self.gc_s >= 0.001 else ""
        return f"{self.seconds * 1000:.0f} ms in {self.what}{gc}{where}"


def describe(handle: asyncio.Handle) -> str:
    callback = getattr(handle, "_callback", None)
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        frame = getattr(coro, "cr_frame", None)
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "done"
        return f"task {task.get_name()} {getattr(coro, '__qualname__', coro)} (now at {where})"
    return repr(callback)[:200]


def _frames(frame: FrameType | None, depth: int = 4) -> str:
    stack = traceback.extract_stack(frame, limit=40)
    inner = [f for f in stack if "asyncio" not in f.filename and "slow_steps" not in f.filename][-depth:]
    return " <- ".join(f"{f.name} ({f.filename.rsplit('/', 2)[-1]}:{f.lineno})" for f in reversed(inner))


def own_time(wall_s: float, before: resource.struct_rusage, after: resource.struct_rusage) -> float:
    """The wall-clock time where the thread waited of its own accord, else the CPU time it used."""
    if after.ru_nvcsw > before.ru_nvcsw:
        return wall_s
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return min(wall_s, cpu)


class SlowSteps:
    """Installed (a context manager) for one thread's event loop: Handle._run is wrapped while it is."""

    def __init__(self, threshold_s: float, report: Report) -> None:
        self.threshold_s = threshold_s
        self.report = report
        self._running: tuple[float, asyncio.Handle] | None = None
        self._seen: dict[int, str] = {}  # id(handle) -> the stack the watcher saw while it ran
        self._stop = threading.Event()
        self._thread: int | None = None
        self._original: Callable[[asyncio.Handle], None] | None = None
        self._gc_began = 0.0
        self._gc_s = 0.0  # the garbage collector's pauses on the loop's thread during the current step

    def __enter__(self) -> SlowSteps:
        self._thread = threading.get_ident()
        original = self._original = asyncio.Handle._run
        steps = self

        def timed(handle: asyncio.Handle) -> None:
            if threading.get_ident() != steps._thread:
                original(handle)
                return
            began, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
            steps._running, steps._gc_s = (began, handle), 0.0
            try:
                original(handle)
            finally:
                steps._running = None
                wall = time.perf_counter() - began
                took = own_time(wall, usage, resource.getrusage(resource.RUSAGE_THREAD)) - steps._gc_s
                seen = steps._seen.pop(id(handle), "") if steps._seen else ""
                if took >= steps.threshold_s:
                    steps.report(SlowStep(took, describe(handle), seen, steps._gc_s))

        asyncio.Handle._run = timed  # type: ignore[method-assign,assignment]
        gc.callbacks.append(self._collecting)
        threading.Thread(target=self._watch, name="k25-slow-steps", daemon=True).start()
        return self

    def _collecting(self, phase: str, _: dict[str, int]) -> None:
        if threading.get_ident() != self._thread:
            return
        if phase == "start":
            self._gc_began = time.perf_counter()
        else:
            self._gc_s += time.perf_counter() - self._gc_began

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._collecting in gc.callbacks:
            gc.callbacks.remove(self._collecting)
        if self._original is not None:
            asyncio.Handle._run = self._original  # type: ignore[method-assign,assignment]

    def _watch(self) -> None:
        """Looks at the loop thread while a step runs past half the threshold: the stack then is the cause."""
        frames: Callable[[], dict[int, Any]] = sys._current_frames
        while not self._stop.wait(self.threshold_s / 2):
            running = self._running
            if running is None or time.perf_counter() - running[0] < self.threshold_s / 2:
                continue
            key = id(running[1])
            if key not in self._seen and self._thread is not None:
                self._seen[key] = _frames(frames().get(self._thread))
