"""The host sampler: reads see what it last sampled, and strays are re-planned as processes come and go."""

from __future__ import annotations

import asyncio
from pathlib import Path

from daemon.core.hoststate import HostState, StateHub
from daemon.host.gpu import GpuInfo, SimulatedGpus
from daemon.host.procs import ProcInfo
from daemon.status.sampler import HostSampler
from tests.api.fakes import BrokenNvml, NoProcs, fake_teardown
from tests.waiting import eventually


class Procs(NoProcs):
    def __init__(self) -> None:
        self.procs: list[ProcInfo] = []

    def snapshot(
        self, device_glob: str, shm_glob: str | None = None, *, with_fds: bool = True
    ) -> list[ProcInfo]:
        return self.procs


async def test_strays_follow_the_processes_and_gpu_errors_are_kept(tmp_path: Path) -> None:
    procs = Procs()
    teardown = fake_teardown()
    teardown.procs = procs
    gpus = SimulatedGpus(procs, "/nonexistent/nvidia*", count=2)
    sampler = HostSampler(gpus, teardown, lambda: (), StateHub(), gpu_every_s=60, strays_every_s=60)
    await sampler.sample_strays()
    assert sampler.strays == []
    procs.procs = [ProcInfo(4242, 1, 0, "python", "VLLM::EngineCore", ("VLLM::EngineCore",), "S", "", "/user.slice",
                            (), (), 1.0)]  # fmt: skip
    await sampler.sample_strays()  # an orphan appeared: the next sample says so
    assert [(v.pid, v.foreign) for v in sampler.strays] == [(4242, True)]
    procs.procs = []
    await sampler.sample_strays()
    assert sampler.strays == []
    await sampler.sample_gpus()
    assert [g.index for g in sampler.gpus] == [0, 1]
    sampler.view = BrokenNvml()
    await sampler.sample_gpus()
    assert (sampler.gpus, sampler.gpu_error) == ([], "NVML failed: Unknown Error")


class CountingGpus:
    required = False

    def __init__(self) -> None:
        self.reads = 0

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        self.reads += 1
        return []

    def driver_version(self) -> str | None:
        return None


async def test_the_gpus_are_read_again_when_a_switch_ends() -> None:
    """Not up to gpu_sample_s later: status would show the GPUs of before the switch meanwhile."""
    hub, gpus = StateHub(), CountingGpus()
    sampler = HostSampler(gpus, fake_teardown(), lambda: (), hub, gpu_every_s=3600, strays_every_s=3600)
    await sampler.start()
    try:
        first, at = gpus.reads, sampler.gpus_at
        assert first == 1
        assert at is not None
        hub.begin_switch(7, "alpha")
        await asyncio.sleep(0)  # a switch that goes on is no reason to read them
        assert gpus.reads == first
        hub.settle(HostState.ACTIVE, "alpha", None)
        await eventually(lambda: _now(gpus.reads > first), what="the GPUs read at the switch's end")
        assert sampler.gpus_at is not None
        assert sampler.gpus_at >= at
    finally:
        await sampler.close()


async def _now(value: bool) -> bool:
    return value
