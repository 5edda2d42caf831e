"""The daemon's services, built once, each with everything it needs, in the order they need each other
(`build`, top to bottom). Where two would need each other the tie has a name: the serving watch reports
`Incidents` that the `Policies` (built after the switcher) act on; every service that starts or checks a
job shares the one `Jobs` registry. `Services.start` and `close` are all the app's lifespan does."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from dataclasses import dataclass

from daemon.api.controllers import Controllers
from daemon.api.controllers.bench import BenchController
from daemon.api.controllers.gpus import GpusController
from daemon.api.controllers.profiles import ProfilesController
from daemon.api.controllers.runs import RunsController
from daemon.api.controllers.status import StatusController
from daemon.api.controllers.teardown import TeardownController
from daemon.capture.sink import CaptureSink
from daemon.core.hoststate import StateHub
from daemon.core.settings import Settings
from daemon.health.watch import HealthWatch
from daemon.host.pagecache import PageCache
from daemon.installed.cache import InstalledCache
from daemon.installed.engines import InstalledEngines
from daemon.parking import rates as park_rates
from daemon.parking.budget import RamBudget, default_budget
from daemon.parking.forecast import ParkForecast
from daemon.parking.ledger import RamLedger
from daemon.parking.service import Parking
from daemon.proving.known_answer import KnownAnswers
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.serving.policies import Incidents, Policies
from daemon.serving.retention import retention
from daemon.serving.units import UnitFollower
from daemon.serving.watch import ServingWatch
from daemon.startup.basics import Basics
from daemon.startup.bench_build import build_bench
from daemon.startup.gpu_build import build_gpus_controller, build_health_watch
from daemon.startup.machine import HostPorts
from daemon.startup.replay import Replay, build_replay
from daemon.status.exporter import K25Collector
from daemon.status.inventory import Inventory
from daemon.status.sampler import HostSampler
from daemon.store.known_answers import KnownAnswerStore
from daemon.store.parked import ParkedStore
from daemon.store.queries import Store
from daemon.store.serving import ServingStore
from daemon.switching.contracts import SwitchHost
from daemon.switching.drain import DrainTimes
from daemon.switching.launch import write_launch
from daemon.switching.maintenance import MaintenanceTeardown
from daemon.switching.preview import SwitchPreviewer
from daemon.switching.reconcile import reconcile
from daemon.switching.restart_recovery import after_restart
from daemon.switching.transaction import Switcher
from daemon.warming.service import WarmService
from daemon.warming.warmer import Warmer

log = logging.getLogger("k25.daemon")


@dataclass(frozen=True)
class Services:
    settings: Settings
    host: HostPorts
    store: Store
    recorder: RunRecorder
    inventory: Inventory
    watch: ServingWatch
    units: UnitFollower
    sampler: HostSampler
    warms: WarmService
    switcher: Switcher
    answers: KnownAnswers
    policies: Policies
    jobs: Jobs
    capture: CaptureSink
    controllers: Controllers
    health: HealthWatch

    @property
    def hub(self) -> StateHub:
        return self.recorder.hub

    async def start(self) -> None:
        """Read the profiles, settle with systemd (what a restart cut short), then follow and sample."""
        profiles = await self.inventory.reload_profiles(ask_engines=False)  # the cache only: start fast
        await self.answers.load()
        rec = await reconcile(
            profiles,
            systemd=self.host.systemd,
            recorder=self.recorder,
            serving=self.watch,
            parking=self.switcher.parking,
            stop_timeout_s=self.settings.stop_timeout_s,
        )
        await after_restart(self.switcher, rec.resume or rec.restore, resume=rec.resume is not None)
        self.units.follow_units()
        self.policies.start()
        await self.sampler.start()
        await self.health.start()
        self.controllers.gpus.service.start()
        self.warms.start_refresh()
        self.capture.start()
        self.inventory.start_asking()
        warnings = [f"runs database: {self.store.recovered}"] if self.store.recovered else []
        if self.capture.enabled and self.capture.token is None:
            warnings.append(f"capture is on but has no token: {self.settings.capture_token_path}")
        if access := await asyncio.to_thread(self.host.teardown.access_problem):
            warnings.append(access)
        for w in warnings:
            log.error("%s", w)
        if warnings:
            self.hub.warnings(tuple(warnings))

    async def close(self) -> None:
        await self.inventory.close()
        await self.units.close()
        await self.watch.close()
        await self.policies.close()
        await self.warms.close()
        await self.jobs.close()
        await self.capture.close()
        await self.sampler.close()
        await self.controllers.gpus.service.close()
        await self.health.close()
        await self.recorder.close()
        log.info("stopping; engine units keep running")
        await self.host.prober.aclose()


async def build(settings: Settings, host: HostPorts) -> Services:
    store = await asyncio.to_thread(Store.open, settings.database_path)
    recorder = RunRecorder(store, StateHub(), held_retry_s=settings.store_retry_s)
    health = build_health_watch(settings, host, store, recorder.hub)
    switch_host = SwitchHost(host.systemd, host.journal, host.teardown, host.prober, health)
    installed = InstalledEngines(
        host.engine_cli,
        InstalledCache(settings.installed_cache_path),
        os.environ,
        settings.engine_help_timeout_s,
    )
    inventory = Inventory(settings, host.systemd, installed)
    b = Basics(settings, host, recorder, Jobs(recorder.hub), inventory, switch_host)
    s, jobs, inventory = settings, b.jobs, b.inventory
    incidents = Incidents()
    warmer = Warmer(
        PageCache(),
        mem_available=host.available,
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
        engine_version=inventory.engine_version,
    )
    parking = _parking(b, answers, warmer)
    serving_store = ServingStore(store)
    watch = ServingWatch(
        settings=s,
        store=serving_store,
        engines=host.prober,
        recorder=recorder,
        incidents=incidents,
        answers=answers,
    )
    units = _units(b, incidents, parking, watch, health)
    sampler = _sampler(b, serving_store)
    warms = WarmService(
        warmer,
        recorder,
        jobs,
        inventory.current,
        every_s=s.residency_every_s,
        always_below=s.warm_always_below,
    )
    switcher = _switcher(b, watch, units, warms, parking, answers)
    policies = Policies(s, recorder.hub, incidents, switcher)
    replay = build_replay(s, recorder.store, serving_store)
    bench = build_bench(b, switcher, warms, watch, answers, replay.datasets.datasets)
    serving = _Serving(watch, units, sampler, policies)
    gpus = build_gpus_controller(b, health, units, parking)
    controllers = _controllers(b, serving, warms, switcher, parking, answers, bench, replay, gpus)
    parts = (recorder, inventory, watch, units, sampler, warms, switcher, answers, policies, jobs)
    return Services(s, host, store, *parts, replay.capture.sink, controllers, health)


def _parking(b: Basics, answers: KnownAnswers, warmer: Warmer) -> Parking:
    return Parking(
        systemd=b.switch_host.systemd,
        teardown=b.switch_host.teardown,
        prober=b.switch_host.prober,
        recorder=b.recorder,
        store=ParkedStore(b.recorder.store),
        jobs=b.jobs,
        answers=answers,
        budget=RamBudget(
            budget_bytes=default_budget(
                b.s.park_ram_budget_bytes, b.host.available(), b.s.park_ram_reserve_bytes
            ),
            weight_bytes=lambda p: warmer.scan(p).bytes,
            mem_available=b.host.available,
            reserve_bytes=b.s.park_ram_reserve_bytes,
            held=lambda: {h.profile: h.bytes for h in b.recorder.hub.status.ram_held if h.parked and h.bytes},
        ),
        forecast=ParkForecast(rates=lambda: park_rates.load(b.s.state_dir), weights=warmer.weights),
        max_parked=b.s.max_parked,
        stop_timeout_s=b.s.stop_timeout_s,
    )


def _units(
    b: Basics, incidents: Incidents, parking: Parking, watch: ServingWatch, health: HealthWatch
) -> UnitFollower:
    return UnitFollower(
        settings=b.s,
        systemd=b.host.systemd,
        journal=b.host.journal,
        recorder=b.recorder,
        profiles=b.inventory.current,
        jobs=b.jobs,
        incidents=incidents,
        parking=parking,
        serving=watch,
        gpus=health,
    )


def _switcher(
    b: Basics,
    watch: ServingWatch,
    units: UnitFollower,
    warms: WarmService,
    parking: Parking,
    answers: KnownAnswers,
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
        units=units,
        jobs=b.jobs,
        drain=DrainTimes(s.drain_grace_s, s.drain_timeout_s, s.drain_poll_s),
        warm=warms.before_start,
        parking=parking,
        answers=answers,
        engine_version=b.inventory.engine_version,
    )


@dataclass(frozen=True)
class _Serving:
    """What the status controller reads of the serving engine and the host (private to `build`)."""

    watch: ServingWatch
    units: UnitFollower
    sampler: HostSampler
    policies: Policies


def _controllers(
    b: Basics,
    serving: _Serving,
    warms: WarmService,
    switcher: Switcher,
    parking: Parking,
    answers: KnownAnswers,
    bench: BenchController,
    replay: Replay,
    gpus: GpusController,
) -> Controllers:
    recorder, watch, units = b.recorder, serving.watch, serving.units
    maintenance = MaintenanceTeardown(
        teardown=b.host.teardown,
        recorder=recorder,
        jobs=b.jobs,
        units=b.inventory.units,
        spared=parking.spared,
        gpus=b.switch_host.gpus,
    )
    collector = K25Collector(
        recorder.hub,
        recorder.store,
        serving.sampler,
        watch.now,
        recorder.cost,
        restart_budget=serving.policies.budget,
        bench_throughput=bench.bench_store.newest_throughput,
        relative_throughput=lambda: {p: r.ratio for p, r in bench.relative.newest().items()},
        more=(gpus.metrics,),
    )
    runs = RunsController(store=recorder.store, hub=recorder.hub, jobs=b.jobs, watch=watch)
    status = StatusController(
        hub=recorder.hub,
        inventory=b.inventory,
        sampler=serving.sampler,
        watch=watch,
        units=units,
        jobs=b.jobs,
        collector=collector,
        runs=runs,
    )
    profiles = ProfilesController(
        inventory=b.inventory,
        units=units,
        switcher=switcher,
        jobs=b.jobs,
        warms=warms,
        parking=parking,
        answers=answers,
        runs=runs,
        previewer=SwitchPreviewer(
            switcher=switcher, jobs=b.jobs, parking=parking, typical=bench.bench_store.typical_seconds
        ),
        default_profile=b.s.default_profile,
    )
    teardown = TeardownController(maintenance)
    return Controllers(status, profiles, runs, teardown, bench, replay.capture, replay.datasets, gpus)


def _sampler(b: Basics, serving_store: ServingStore) -> HostSampler:
    return HostSampler(
        b.host.gpus,
        b.host.teardown,
        b.inventory.units,
        b.recorder.hub,
        gpu_every_s=b.s.gpu_sample_s,
        strays_every_s=b.s.strays_sample_s,
        maintenance=functools.partial(retention, serving_store, b.s),
        ledger=RamLedger(
            memory=b.host.memory, systemd=b.host.systemd, profiles=b.inventory.current, hub=b.recorder.hub
        ).sample,
    )
