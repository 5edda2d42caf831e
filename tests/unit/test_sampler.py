"""The host sampler: reads see what it last sampled, and strays are re-planned as processes come and go."""

from __future__ import annotations

from pathlib import Path

from daemon.host.gpu import SimulatedGpus
from daemon.host.procs import ProcInfo
from daemon.status.sampler import HostSampler
from tests.api.fakes import BrokenNvml, NoProcs, fake_teardown


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
    sampler = HostSampler(SimulatedGpus(procs, "/nonexistent/nvidia*", count=2), teardown, lambda: (),
                          gpu_every_s=60, strays_every_s=60)  # fmt: skip
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
