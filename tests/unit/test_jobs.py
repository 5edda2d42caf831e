"""The one job registry: what may start beside what, the one cancel path, and what keeps the host out of
the balancer's rotation."""

from __future__ import annotations

import asyncio

import pytest

from daemon.core.errors import Busy, WrongState
from daemon.core.hoststate import StateHub
from daemon.runs.jobs import JobKind, Jobs


async def test_an_experiment_holds_the_host_and_keeps_it_out_of_rotation() -> None:
    jobs = Jobs(StateHub())
    release = asyncio.Event()
    with jobs.admit(JobKind.EXPERIMENT, isolated=True) as slot:
        slot.start(7, release.wait())
    assert jobs.out_of_rotation() == "experiment 7"
    with pytest.raises(Busy, match="experiment run 7 is in progress"):
        with jobs.admit(JobKind.BENCHMARK):
            pass
    with jobs.admit(JobKind.SWITCH, parent=7) as own:  # the experiment's own switch goes ahead
        own.start(8, asyncio.sleep(0))
    with pytest.raises(Busy, match=r"run 8 \(\) is in progress"):  # one switch at a time
        with jobs.admit(JobKind.SWITCH):
            pass
    await jobs.wait(8)
    with jobs.admit(JobKind.WARM, subject="alpha") as warm:  # warms run beside everything
        warm.start(9, release.wait())
    with pytest.raises(Busy, match="being warmed already"):
        with jobs.admit(JobKind.WARM, subject="alpha"):
            pass
    await asyncio.sleep(0)  # the warm's task runs its first step
    jobs.cancel(9)
    with pytest.raises(Busy, match="already being cancelled"):
        jobs.cancel(9)
    release.set()
    await jobs.wait(7)
    assert jobs.out_of_rotation() is None
    with pytest.raises(WrongState, match="run 7 is not in progress"):
        jobs.cancel(7)
    assert jobs.running() == []


async def test_a_slot_whose_run_never_started_is_given_up() -> None:
    jobs = Jobs(StateHub())
    with pytest.raises(RuntimeError), jobs.admit(JobKind.BENCHMARK):
        raise RuntimeError("the run could not be created")
    assert jobs.busy_reason() is None


async def test_a_job_whose_task_has_not_begun_refuses_a_cancel_that_would_leave_its_run_unended() -> None:
    """asyncio throws a cancel into a coroutine that has not started, past every handler in it: the
    benchmark runner's (which records the run's end) never ran, and the run stayed running for good."""
    jobs = Jobs(StateHub())
    ended: list[str] = []

    async def body() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("cancelled")  # the run's end, recorded

    with jobs.admit(JobKind.BENCHMARK) as slot:
        task = slot.start(5, body())
    with pytest.raises(Busy, match="run 5 is starting: cancel again in a moment"):
        jobs.cancel(5)
    await asyncio.sleep(0)
    jobs.cancel(5)
    await task
    assert ended == ["cancelled"]
    # The job that started one (an experiment its benchmark) stops it at once: it waits for the begin.
    with jobs.admit(JobKind.BENCHMARK) as slot:
        slot.start(6, body())
    await jobs.stop(6)
    assert ended == ["cancelled", "cancelled"]
    assert jobs.running() == []
