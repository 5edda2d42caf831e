"""Finding what blocks the event loop: every callback the loop runs (a task's step, a handle) is timed, and
one that runs past a threshold is reported with what it was and where it was when a watcher thread looked
(the main thread's stack while the step still ran: the blocking call itself). asyncio's own debug mode
reports slow callbacks too, but it captures a traceback for every handle it creates, which makes the
steps it measures slow; this costs two clock and two getrusage reads a callback. A step's time is its own:
where the loop's thread waited of its own accord in a blocking call (a socket, a file, a sleep, a child, a
lock that Python code waits on), the wall-clock time counts, since that wait is what the guard is for;
otherwise it is the CPU time the step used. So neither a busy machine that preempts the thread nor the
interpreter's GIL, held by a worker thread while the step wanted it, makes a fast step look slow (both
stretch the wall-clock time; a GIL wait is a voluntary context switch too, so switch counts cannot tell
it from a blocking call). The watcher thread tells them apart: it samples the loop thread's wait channel
while a step runs long (daemon/host/threads.py). The garbage collector's pauses within a step are the
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
WaitChannel = Callable[[int], str]  # a thread's native id -> its wait channel (daemon/host/threads.py)


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


# Python code that waits on a lock: a futex wait with one of these innermost is a blocking call, not the GIL.
LOCK_WAITS = ("threading.py", "queue.py", "concurrent/futures/_base.py")


def blocking_wait(channel: str, innermost_file: str) -> bool:
    """One sample of the loop's thread: waiting of its own accord for something other than the GIL."""
    if channel in ("", "0"):
        return False  # running, or ready and waiting for a CPU
    if "futex" not in channel:
        return True  # a socket, a file, a sleep, a child, epoll
    return innermost_file.endswith(LOCK_WAITS)


def own_time(
    wall_s: float, before: resource.struct_rusage, after: resource.struct_rusage, blocked: bool | None = None
) -> float:
    """The wall-clock time where the thread waited in a blocking call, else the CPU time it used. `blocked`:
    what the samples of the step saw (None where nothing sampled: any voluntary wait counts)."""
    if blocked if blocked is not None else after.ru_nvcsw > before.ru_nvcsw:
        return wall_s
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return min(wall_s, cpu)


class SlowSteps:
    """Installed (a context manager) for one thread's event loop: Handle._run is wrapped while it is."""

    def __init__(self, threshold_s: float, report: Report, wait_channel: WaitChannel | None = None) -> None:
        self.threshold_s = threshold_s
        self.report = report
        self._wait_channel = wait_channel
        self._native: int | None = None
        self._blocked: tuple[float, asyncio.Handle] | None = None  # the step a sample saw in a blocking call
        self._running: tuple[float, asyncio.Handle] | None = None
        self._seen: dict[int, str] = {}  # id(handle) -> the stack the watcher saw while it ran
        self._stop = threading.Event()
        self._thread: int | None = None
        self._original: Callable[[asyncio.Handle], None] | None = None
        self._gc_began = 0.0
        self._gc_s = 0.0  # the garbage collector's pauses on the loop's thread during the current step

    def __enter__(self) -> SlowSteps:
        self._thread, self._native = threading.get_ident(), threading.get_native_id()
        original = self._original = asyncio.Handle._run
        steps = self

        def timed(handle: asyncio.Handle) -> None:
            if threading.get_ident() != steps._thread:
                original(handle)
                return
            began, usage = time.perf_counter(), resource.getrusage(resource.RUSAGE_THREAD)
            step = steps._running = (began, handle)
            steps._gc_s = 0.0
            try:
                original(handle)
            finally:
                steps._running = None
                wall = time.perf_counter() - began
                blocked = steps._blocked is step if steps._wait_channel is not None else None
                after = resource.getrusage(resource.RUSAGE_THREAD)
                took = own_time(wall, usage, after, blocked) - steps._gc_s
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
        """Looks at the loop thread while a step runs long: the stack then (the first look) is the cause, and
        the thread's wait channel at each look says whether it blocks or only waits for the GIL."""
        frames: Callable[[], dict[int, Any]] = sys._current_frames
        tick = self.threshold_s / (5 if self._wait_channel is not None else 2)
        while not self._stop.wait(tick):
            running = self._running
            if running is None or time.perf_counter() - running[0] < tick or self._thread is None:
                continue
            key = id(running[1])
            channel = ""
            if self._wait_channel is not None and self._native is not None:
                channel = self._wait_channel(self._native)
            frame = frames().get(self._thread)
            if self._running is not running:
                continue  # the step ended while we looked: what we saw is the loop's, not the step's
            if key not in self._seen and time.perf_counter() - running[0] >= self.threshold_s / 2:
                self._seen[key] = _frames(frame)
            if channel and blocking_wait(channel, frame.f_code.co_filename if frame is not None else ""):
                self._blocked = running
