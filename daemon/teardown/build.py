"""Builds the real host ports and services from settings (the app lifespan and CLI commands use it)."""

from __future__ import annotations

from pathlib import Path

from daemon.core.settings import Settings
from daemon.engines import all_front_end_titles, all_process_titles, all_shm_patterns
from daemon.host.gpu import GpuView, NoGpus, NvmlGpus, SimulatedGpus
from daemon.host.gpu_health import GpuHealthPort, NoHealth
from daemon.host.host_facts import HostFacts, NoFacts, NvmlFacts, SimulatedFacts
from daemon.host.nvml_health import NvmlHealth
from daemon.host.procs import ProcfsProcesses
from daemon.host.shm import DevShm
from daemon.host.signals import PidfdControl
from daemon.host.sim_health import SimulatedHealth
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import TeardownPolicy


def build_gpus(settings: Settings) -> GpuView:
    if settings.gpu_backend == "simulated":
        return SimulatedGpus(
            ProcfsProcesses(),
            settings.gpu_device_glob,
            count=settings.sim_gpu_count,
            total_mib=settings.sim_gpu_total_mib,
        )
    if settings.gpu_backend == "none":
        return NoGpus()
    return NvmlGpus()


def build_health(settings: Settings, gpus: GpuView) -> GpuHealthPort:
    """The health readings beside the GPUs: NVML's (sharing its init), the sandbox's files, or none."""
    if isinstance(gpus, NvmlGpus):
        return NvmlHealth(gpus)
    if settings.gpu_backend == "simulated":
        return SimulatedHealth(sim_health_dir(settings), settings.sim_gpu_count)
    return NoHealth()


def build_facts(settings: Settings, gpus: GpuView) -> HostFacts:
    if isinstance(gpus, NvmlGpus):
        return NvmlFacts(gpus)
    if settings.gpu_backend == "simulated":
        return SimulatedFacts(sim_health_dir(settings), settings.sim_gpu_count)
    return NoFacts()


def sim_health_dir(settings: Settings) -> Path:
    """Where the sandbox's simulated GPUs keep their faults: beside their device files."""
    return Path(settings.gpu_device_glob).parent / "health"


def teardown_policy(settings: Settings) -> TeardownPolicy:
    return TeardownPolicy(
        device_glob=settings.gpu_device_glob,
        engine_titles=all_process_titles(),
        shm_patterns=all_shm_patterns(),
        protected_names=tuple(settings.protected_names),
        foreign=settings.foreign_gpu_policy,
        front_end_titles=all_front_end_titles(),
    )


def build_teardown(settings: Settings, gpus: GpuView | None = None) -> Teardown:
    return Teardown(
        ProcfsProcesses(),
        gpus or build_gpus(settings),
        DevShm(settings.shm_dir),
        PidfdControl(),
        teardown_policy(settings),
        term_grace_s=settings.term_grace_s,
        kill_grace_s=settings.kill_grace_s,
        orphan_grace_s=settings.orphan_grace_s,
        verify_timeout_s=settings.verify_timeout_s,
        verify_samples=settings.verify_samples,
        slack_mib=settings.idle_memory_slack_mib,
    )
