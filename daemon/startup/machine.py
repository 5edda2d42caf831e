"""What the daemon uses of the machine (`HostPorts`): systemd and its timers over one D-Bus connection, the
journal, the GPUs, the teardown, the engines' HTTP, the benchmark's client. Tests hand in fakes;
`real_ports` builds the real ones."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.core.errors import K25Error
from daemon.core.settings import Settings
from daemon.engines.client import EnginePort, Prober
from daemon.health.watch import KernelFollow
from daemon.host.engine_cli import EngineCli, LocalEngineCli
from daemon.host.gpu import GpuView
from daemon.host.gpu_health import GpuHealthPort, NoHealth
from daemon.host.host_facts import HostFacts, NoFacts
from daemon.host.journal import JournalctlJournal, JournalPort
from daemon.host.memory import NoMemory, ProcessMemory, PsutilMemory, available_of
from daemon.host.pagecache import mem_available
from daemon.host.systemd import SdbusSystemd, SystemdPort, open_system_bus
from daemon.host.timers import NoTimers, SdbusTimers, TimerPort
from daemon.measure.client import new_client
from daemon.measure.runner import HttpFactory
from daemon.teardown.build import build_facts, build_gpus, build_health, build_teardown
from daemon.teardown.execute import Teardown


@dataclass
class HostPorts:
    """What the daemon uses of the machine; tests hand in fakes, `real_ports` builds the real ones."""

    systemd: SystemdPort
    journal: JournalPort
    gpus: GpuView
    teardown: Teardown
    prober: EnginePort
    bench_http: HttpFactory = field(default=lambda n, t: new_client(t, n))  # the benchmark's requests
    timers: TimerPort = field(default_factory=NoTimers)  # transient systemd timers (scheduled experiments)
    memory: ProcessMemory = field(default_factory=NoMemory)  # engines' host RAM (the RAM ledger)
    available: Callable[[], int] = mem_available  # MemAvailable: the host's, or the memory cgroup's
    engine_cli: EngineCli = field(default_factory=LocalEngineCli)  # the engines' own programs (help, version)
    gpu_health: GpuHealthPort = field(default_factory=NoHealth)  # ECC, remaps, links; the driver's events
    kernel_log: KernelFollow | None = None  # the kernel's lines in the journal (the driver's Xids)
    facts: HostFacts = field(default_factory=NoFacts)  # the driver, GPU modes, /dev/shm, the clock (doctor)


def real_ports(settings: Settings) -> HostPorts:
    gpus = build_gpus(settings)
    bus = open_system_bus()  # one bus for the process, opened in the lifespan
    journal = JournalctlJournal(settings.journal_command)
    return HostPorts(
        systemd=SdbusSystemd(bus),
        timers=SdbusTimers(bus),
        journal=journal,
        gpus=gpus,
        teardown=build_teardown(settings, gpus),
        gpu_health=build_health(settings, gpus),
        facts=build_facts(settings, gpus),
        kernel_log=journal.follow_kernel,
        prober=Prober(),
        memory=PsutilMemory(),
        available=available_of(settings.memory_cgroup),
    )


def hardware(gpus: GpuView) -> Callable[[list[int]], tuple[list[str], str | None]]:
    """GPU names of the given indices and the driver version, for a benchmark's provenance (in a thread)."""

    def read(indices: list[int]) -> tuple[list[str], str | None]:
        try:
            seen = {g.index: g.name for g in gpus.gpus(light=True)}
            driver = gpus.driver_version()
        except K25Error:
            return [], None
        return [seen[i] for i in indices if i in seen], driver

    return read
