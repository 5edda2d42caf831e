"""The event-loop guard the API tests run under: a callback that blocks the loop is reported (with what
it was), one that awaits is not, and the test's own coroutine is left to the test."""

from __future__ import annotations

import asyncio
import resource
import time

from daemon.core.slow_steps import own_time
from tests.slow_callbacks import SlowCallbacks


async def test_a_blocking_callback_is_reported_and_an_awaiting_one_is_not() -> None:
    loop = asyncio.get_running_loop()

    async def polite() -> None:
        await asyncio.sleep(0.15)  # as long, but the loop runs meanwhile

    with SlowCallbacks(loop, threshold_s=0.05) as slow:
        loop.call_soon(time.sleep, 0.12)  # blocks the loop, as a sync call in a route would
        await asyncio.gather(polite(), asyncio.sleep(0.2))
    assert len(slow.seen) == 1, slow.seen
    assert "<built-in function sleep>" in slow.seen[0], slow.seen


async def test_the_tests_own_coroutine_is_not_the_daemons() -> None:
    with SlowCallbacks(asyncio.get_running_loop(), threshold_s=0.05) as slow:
        time.sleep(0.08)  # noqa: ASYNC251 - on purpose: this test's own body blocks (asyncio.Runner made its task)
        await asyncio.sleep(0)
    assert slow.seen == []


async def test_a_garbage_collection_within_a_step_is_not_the_steps_code() -> None:
    """A collection of a large heap pauses whatever step triggers it: named, but not counted against it."""
    import gc

    loop = asyncio.get_running_loop()
    heap = [[i] for i in range(1_500_000)]  # objects the collector has to walk
    began = time.perf_counter()
    gc.collect()
    pause = time.perf_counter() - began
    with SlowCallbacks(loop, threshold_s=pause / 3) as slow:
        loop.call_soon(gc.collect)  # the step itself is nothing but the collector's pause
        loop.call_soon(time.sleep, pause)  # a step that blocks as long: reported
        await asyncio.sleep(pause * 3)
    del heap
    assert len(slow.seen) == 1, slow.seen
    assert "<built-in function sleep>" in slow.seen[0], slow.seen


def _usage(cpu_s: float, voluntary: int) -> resource.struct_rusage:
    return resource.struct_rusage((cpu_s, 0.0, *([0] * 6), 0, 0, 0, 0, 0, 0, voluntary, 0))


def test_a_step_preempted_by_a_busy_machine_counts_its_cpu_time_and_a_waiting_one_its_wall_time() -> None:
    """Other processes on the same cores stretch a step's wall-clock time without it blocking: its own time
    is then the CPU it used. A step that waited of its own accord (a blocking call) counts the wait."""
    before = _usage(1.0, voluntary=5)
    assert abs(own_time(0.3, before, _usage(1.01, voluntary=5)) - 0.01) < 1e-9
    assert own_time(0.3, before, _usage(1.01, voluntary=6)) == 0.3


async def test_a_step_that_computes_on_the_loop_is_reported() -> None:
    """CPU work on the loop is the step's own time: a busy machine or not, it is reported."""
    loop = asyncio.get_running_loop()

    def compute() -> None:
        began = time.thread_time()
        while time.thread_time() - began < 0.08:
            pass

    with SlowCallbacks(loop, threshold_s=0.05) as slow:
        loop.call_soon(compute)
        await asyncio.sleep(0.2)
    assert len(slow.seen) == 1, slow.seen
    assert "compute" in slow.seen[0], slow.seen
