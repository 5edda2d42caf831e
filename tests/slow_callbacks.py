"""A guard for the daemon's event loop: every callback the loop runs is timed (daemon/core/slow_steps.py) and
each that ran longer than a threshold without yielding is collected, so a test fails when a blocking call
lands on the loop. Not a timing test: a step of the daemon's own code that blocks for 100 ms is a bug
however fast the machine."""

from __future__ import annotations

import asyncio

from daemon.core.slow_steps import SlowStep, SlowSteps
from daemon.host.threads import wait_channel

SLOW_S = 0.1
# The test's own coroutine (its task is made by asyncio.Runner, the fixtures' by pytest-asyncio) is the
# test's business, not the daemon's.
OWN_TASKS = ("test_", "_asyncgen_fixture_wrapper", "setup", "finalizer")
# The loop's own wake-up: it drains the self-pipe another thread wrote to (a to_thread result) from a
# non-blocking socket, and never blocks; seen slow only when the loop's thread waited for the GIL that the
# waking thread still held while a busy machine preempted it. No code of the daemon's runs in it.
LOOP_OWN = ("<bound method BaseSelectorEventLoop._read_from_self ",)
# The default executor starting a worker thread (a to_thread when the pool grows): Thread.start waits for
# the new thread to be scheduled once, a handshake of the interpreter's, long only on a busy machine.
EXECUTOR_OWN = "_adjust_thread_count (thread.py"


class SlowCallbacks:
    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float = SLOW_S) -> None:
        self.loop = loop
        self.seen: list[str] = []
        self._steps = SlowSteps(threshold_s, self._report, wait_channel)

    def _report(self, step: SlowStep) -> None:
        coro = step.what.split(" ")[2] if step.what.startswith("task ") else ""
        if step.what.startswith(LOOP_OWN) or EXECUTOR_OWN in step.blocked_in:
            return
        if not coro.startswith(OWN_TASKS) and ".<locals>.setup" not in coro:
            self.seen.append(str(step))

    def __enter__(self) -> SlowCallbacks:
        self._steps.__enter__()
        return self

    def __exit__(self, *_: object) -> None:
        self._steps.__exit__()
