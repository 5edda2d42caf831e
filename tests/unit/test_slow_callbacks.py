"""The event-loop guard the API tests run under: a callback that blocks the loop is reported (with what
it was), one that awaits is not, and the test's own coroutine is left to the test."""

from __future__ import annotations

import asyncio
import resource
import threading
import time

import pytest

from daemon.core.slow_steps import blocking_wait, own_time
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


def test_a_wait_for_the_gil_is_not_a_blocking_call_and_a_lock_wait_is() -> None:
    """Samples of the loop's thread: a futex wait is the GIL unless Python code waits on a lock there."""
    assert not blocking_wait("0", "/app/daemon/runs/controller.py")  # running, or ready for a CPU
    assert not blocking_wait("futex_do_wait", "/app/daemon/runs/controller.py")
    assert blocking_wait("futex_do_wait", "/usr/lib/python3.11/threading.py")  # Event.wait, Future.result
    assert blocking_wait("hrtimer_nanosleep", "/app/daemon/runs/controller.py")
    assert blocking_wait("wait_woken", "/usr/lib/python3.11/socket.py")
    assert own_time(0.3, _usage(1.0, 5), _usage(1.01, 6), blocked=False) == pytest.approx(0.01)
    assert own_time(0.3, _usage(1.0, 5), _usage(1.01, 6), blocked=True) == 0.3


async def test_a_step_that_waits_for_the_gil_a_worker_thread_holds_is_not_reported() -> None:
    """A worker thread that holds the GIL (C code that never lets go of it) stretches the loop's step that
    wants it back: wall-clock time, not the step's own. CI saw such steps of 113-269 ms."""
    loop = asyncio.get_running_loop()
    n = 1
    while True:  # a C loop that holds the GIL for about 0.3 s on this machine
        began = time.perf_counter()
        sum(range(n))
        if time.perf_counter() - began > 0.03:
            break
        n *= 2
    n *= 10

    def step() -> None:
        threading.Thread(target=sum, args=(range(n),), daemon=True).start()
        began = time.thread_time()
        while time.thread_time() - began < 0.015:  # bytecode: the thread asks for the GIL, and gets it
            pass

    with SlowCallbacks(loop, threshold_s=0.05) as slow:
        began = time.perf_counter()
        loop.call_soon(step)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        took = time.perf_counter() - began
        await asyncio.sleep(0.1)
    assert took > 0.1, "the worker never took the GIL from the step: the test did not test"
    assert slow.seen == []


async def test_a_step_that_waits_on_a_lock_is_reported() -> None:
    loop = asyncio.get_running_loop()
    done = threading.Event()
    threading.Timer(0.12, done.set).start()
    with SlowCallbacks(loop, threshold_s=0.05) as slow:
        loop.call_soon(done.wait)  # a Future.result() or an Event.wait() on the loop
        await asyncio.sleep(0.2)
    assert len(slow.seen) == 1, slow.seen
    assert "wait" in slow.seen[0], slow.seen


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
