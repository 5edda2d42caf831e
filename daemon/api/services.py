"""The daemon's services, built once, each with everything it needs, in the order they need each other
(`build`, top to bottom). Where two would need each other the tie has a name: the serving watch reports
`Incidents` that the `Policies` (built after the switcher) act on; every service that starts or checks a
job shares the one `Jobs` registry. `Services.start` and `close` are all the app's lifespan does."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from daemon.api.benchmark_controller import BenchController
from daemon.api.controller import Controller
from daemon.benchmark.client import new_client
from daemon.benchmark.experiments import Experiments
from daemon.benchmark.runner import BenchmarkRunner, HttpFactory
from daemon.benchmark.schedules import Schedules
from daemon.benchmark.sweep.service import Sweeps
from daemon.core.command import k25_command
from daemon.core.errors import K25Error
from daemon.core.hoststate import StateHub
from daemon.core.settings import Settings
from daemon.engines.client import EnginePort, Prober
from daemon.host.gpu import GpuView
from daemon.host.journal import JournalctlJournal, JournalPort
from daemon.host.pagecache import PageCache, mem_available
from daemon.host.systemd import SdbusSystemd, SystemdPort, open_system_bus
from daemon.host.timers import NoTimers, SdbusTimers, TimerPort
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.serving.policies import Incidents, Policies
from daemon.serving.retention import retention
from daemon.serving.watch import ServingWatch
from daemon.status.exporter import K25Collector
from daemon.status.inventory import Inventory
from daemon.status.sampler import HostSampler
from daemon.store.bench import BenchStore
from daemon.store.known_answers import KnownAnswerStore
from daemon.store.parked import ParkedStore
from daemon.store.queries import Store
from daemon.store.serving import ServingStore
from daemon.switching.contracts import SwitchHost
from daemon.switching.drain import DrainTimes
from daemon.switching.known_answer import KnownAnswers
from daemon.switching.launch import write_launch
from daemon.switching.maintenance import MaintenanceTeardown
from daemon.switching.parking import Parking
from daemon.switching.reconcile import reconcile
from daemon.switching.transaction import Switcher
from daemon.teardown.build import build_gpus, build_teardown
from daemon.teardown.execute import Teardown
from daemon.warming.service import WarmService
from daemon.warming.warmer import Warmer

log = logging.getLogger("k25.daemon")


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


def real_ports(settings: Settings) -> HostPorts:
    gpus = build_gpus(settings)
    bus = open_system_bus()  # one bus for the process, opened in the lifespan
    return HostPorts(
        systemd=SdbusSystemd(bus),
        timers=SdbusTimers(bus),
        journal=JournalctlJournal(settings.journal_command),
        gpus=gpus,
        teardown=build_teardown(settings, gpus),
        prober=Prober(),
    )


def _hardware(gpus: GpuView) -> Callable[[list[int]], tuple[list[str], str | None]]:
    """GPU names of the given indices and the driver version, for a benchmark's provenance (in a thread)."""

    def read(indices: list[int]) -> tuple[list[str], str | None]:
        try:
            seen = {g.index: g.name for g in gpus.gpus(light=True)}
            driver = gpus.driver_version()
        except K25Error:
            return [], None
        return [seen[i] for i in indices if i in seen], driver

    return read


@dataclass(frozen=True)
class Services:
    settings: Settings
    host: HostPorts
    store: Store
    recorder: RunRecorder
    inventory: Inventory
    watch: ServingWatch
    sampler: HostSampler
    warms: WarmService
    switcher: Switcher
    answers: KnownAnswers
    policies: Policies
    controller: Controller

    @property
    def hub(self) -> StateHub:
        return self.recorder.hub

    async def start(self) -> None:
        """Read the profiles, settle with systemd (what a restart cut short), then follow and sample."""
        profiles = await self.inventory.reload_profiles()
        await self.answers.load()
        rec = await reconcile(
            profiles,
            systemd=self.host.systemd,
            recorder=self.recorder,
            serving=self.watch,
            parking=self.switcher.parking,
            stop_timeout_s=self.settings.stop_timeout_s,
        )
        await self.switcher.after_restart(rec.resume or rec.restore, resume=rec.resume is not None)
        self.watch.follow_units()
        self.policies.start()
        await self.sampler.start()
        self.warms.start_refresh()
        warnings = [f"runs database: {self.store.recovered}"] if self.store.recovered else []
        if access := await asyncio.to_thread(self.host.teardown.access_problem):
            warnings.append(access)
        for w in warnings:
            log.error("%s", w)
        if warnings:
            self.hub.warnings(tuple(warnings))

    async def close(self) -> None:
        await self.watch.close()
        await self.policies.close()
        await self.warms.close()
        await self.controller.jobs.close()
        await self.sampler.close()
        await self.recorder.close()
        log.info("stopping; engine units keep running")
        await self.host.prober.aclose()


@dataclass(frozen=True)
class _Basics:
    """What every service below is built from (private to `build`: no service holds it)."""

    s: Settings
    host: HostPorts
    recorder: RunRecorder
    jobs: Jobs
    inventory: Inventory
    switch_host: SwitchHost


async def build(settings: Settings, host: HostPorts) -> Services:
    store = await asyncio.to_thread(Store.open, settings.database_path)
    recorder = RunRecorder(store, StateHub(), held_retry_s=settings.store_retry_s)
    switch_host = SwitchHost(host.systemd, host.journal, host.teardown, host.prober)
    b = _Basics(settings, host, recorder, Jobs(recorder.hub), Inventory(settings, host.systemd), switch_host)
    s, jobs, inventory = settings, b.jobs, b.inventory
    incidents = Incidents()
    warmer = Warmer(
        PageCache(),
        mem_available=mem_available,
        reserve=s.warm_reserve_bytes,
        workers=s.warm_workers,
        block=s.warm_block_bytes,
    )
    answers = KnownAnswers(
        store=KnownAnswerStore(store),
        recorder=recorder,
        prober=host.prober,
        default_profile=s.default_profile,
        profiles=inventory.current,
    )
    parking = _parking(b, answers, warmer)
    serving_store = ServingStore(store)
    watch = _watch(b, serving_store, incidents, parking, answers)
    sampler = HostSampler(
        host.gpus,
        host.teardown,
        inventory.units,
        recorder.hub,
        gpu_every_s=s.gpu_sample_s,
        strays_every_s=s.strays_sample_s,
        maintenance=functools.partial(retention, serving_store, s),
    )
    warms = WarmService(
        warmer,
        recorder,
        jobs,
        inventory.current,
        every_s=s.residency_every_s,
        always_below=s.warm_always_below,
    )
    switcher = _switcher(b, watch, warms, parking, answers)
    policies = Policies(s, recorder.hub, incidents, switcher)
    benchmarks = _benchmarks(s, host, recorder, jobs, inventory, switcher, warms)
    schedules = Schedules(
        timers=host.timers,
        folder=s.state_dir / "schedules",
        command=k25_command(),
        benchmarks=benchmarks,
        recorder=recorder,
        jobs=jobs,
        running_now=lambda: now.running if (now := watch.now()) else None,
    )
    bench = BenchController(benchmarks, schedules, answers)
    controller = _controller(b, sampler, watch, warms, switcher, parking, answers, policies, bench)
    return Services(
        s, host, store, recorder, inventory, watch, sampler, warms, switcher, answers, policies, controller
    )


def _parking(b: _Basics, answers: KnownAnswers, warmer: Warmer) -> Parking:
    return Parking(
        host=b.switch_host,
        recorder=b.recorder,
        store=ParkedStore(b.recorder.store),
        jobs=b.jobs,
        answers=answers,
        weight_bytes=lambda p: warmer.scan(p).bytes,
        mem_available=mem_available,
        ram_reserve_bytes=b.s.park_ram_reserve_bytes,
        max_parked=b.s.max_parked,
        stop_timeout_s=b.s.stop_timeout_s,
    )


def _watch(
    b: _Basics, store: ServingStore, incidents: Incidents, parking: Parking, answers: KnownAnswers
) -> ServingWatch:
    return ServingWatch(
        settings=b.s,
        store=store,
        systemd=b.host.systemd,
        journal=b.host.journal,
        engines=b.host.prober,
        recorder=b.recorder,
        profiles=b.inventory.current,
        jobs=b.jobs,
        incidents=incidents,
        parking=parking,
        answers=answers,
    )


def _switcher(
    b: _Basics, watch: ServingWatch, warms: WarmService, parking: Parking, answers: KnownAnswers
) -> Switcher:
    s = b.s
    return Switcher(
        profiles=b.inventory.reload_profiles,
        host=b.switch_host,
        store=b.recorder.store,
        recorder=b.recorder,
        default_profile=s.default_profile,
        stop_timeout_s=s.stop_timeout_s,
        write_launch=lambda lp, run_id, argv: write_launch(s, lp, run_id=run_id, argv=argv),
        serving=watch,
        jobs=b.jobs,
        drain=DrainTimes(s.drain_grace_s, s.drain_timeout_s, s.drain_poll_s),
        warm=warms.before_start,
        parking=parking,
        answers=answers,
    )


def _controller(
    b: _Basics,
    sampler: HostSampler,
    watch: ServingWatch,
    warms: WarmService,
    switcher: Switcher,
    parking: Parking,
    answers: KnownAnswers,
    policies: Policies,
    bench: BenchController,
) -> Controller:
    recorder = b.recorder
    maintenance = MaintenanceTeardown(
        teardown=b.host.teardown,
        recorder=recorder,
        jobs=b.jobs,
        units=b.inventory.units,
        spared=parking.spared,
    )
    collector = K25Collector(
        recorder.hub,
        recorder.store,
        sampler,
        watch.now,
        recorder.cost,
        restart_budget=policies.budget,
        bench_throughput=bench.bench_store.newest_throughput,
    )
    return Controller(
        inventory=b.inventory,
        sampler=sampler,
        switcher=switcher,
        recorder=recorder,
        maintenance=maintenance,
        default_profile=b.s.default_profile,
        watch=watch,
        bench=bench,
        jobs=b.jobs,
        warms=warms,
        parking=parking,
        answers=answers,
        collector=collector,
    )


def _benchmarks(
    s: Settings,
    host: HostPorts,
    recorder: RunRecorder,
    jobs: Jobs,
    inventory: Inventory,
    switcher: Switcher,
    warms: WarmService,
) -> Experiments:
    bench_store = BenchStore(recorder.store)
    runner = BenchmarkRunner(
        recorder=recorder, bench_store=bench_store, http=host.bench_http, hardware=_hardware(host.gpus)
    )
    sweeps = Sweeps(
        bench_store=bench_store,
        profiles=inventory.reload_profiles,
        variants=inventory,
        profiles_path=s.profiles_path,
        max_variants=s.max_variants,
        check_paths=s.check_model_paths,
        service_port=s.service_port,
    )
    return Experiments(
        runner=runner,
        jobs=jobs,
        recorder=recorder,
        switcher=switcher,
        profiles=inventory.reload_profiles,
        bench_store=bench_store,
        default_profile=s.default_profile,
        sweeps=sweeps,
        warm=warms.start,
    )
