"""The FastAPI app factory. The lifespan builds the real host ports (one D-Bus connection per process),
upgrades the database, reconciles with systemd, then says READY=1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI

from daemon.api import routes
from daemon.api.auth import load_token
from daemon.api.benchmark_controller import BenchController
from daemon.api.controller import Controller
from daemon.api.http import SseGate, install
from daemon.api.schemas import HealthOut
from daemon.benchmark.client import new_client
from daemon.benchmark.experiments import Benchmarks
from daemon.benchmark.runner import BenchmarkRunner, HttpFactory
from daemon.core.errors import K25Error
from daemon.core.hoststate import HostStatus, StateHub, describe
from daemon.core.settings import Settings
from daemon.engines.client import EnginePort, Prober
from daemon.host.gpu import GpuView
from daemon.host.journal import JournalctlJournal, JournalPort
from daemon.host.notify import sd_notify
from daemon.host.pagecache import PageCache, mem_available
from daemon.host.systemd import SdbusSystemd, SystemdPort, open_system_bus
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.serving.watch import ServingWatch
from daemon.status.inventory import Inventory
from daemon.status.sampler import HostSampler
from daemon.store.bench import BenchStore
from daemon.store.queries import Store
from daemon.switching.launch import write_launch
from daemon.switching.reconcile import reconcile
from daemon.switching.transaction import Switcher, SwitchPorts
from daemon.teardown.build import build_gpus, build_teardown
from daemon.teardown.execute import Teardown
from daemon.warming.service import WarmService
from daemon.warming.warmer import Warmer

log = logging.getLogger("k25.daemon")


@contextlib.contextmanager
def _reload_on_sighup(controller: Controller) -> Iterator[None]:
    """`systemctl reload k25-ctl` (ExecReload sends SIGHUP): re-read the profiles folder, report it."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    async def reload() -> None:
        sd_notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")
        result = await controller.reload()
        log.info("reload: %d valid profiles, %d invalid", len(result.valid), len(result.invalid))
        sd_notify(f"READY=1\nSTATUS={describe(controller.hub.status)}")

    def on_hup() -> None:
        task = asyncio.create_task(reload())
        pending.add(task)
        task.add_done_callback(pending.discard)

    try:
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    except (RuntimeError, ValueError):  # not the main thread (tests drive the app in-process)
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)


async def _notify_status(hub: StateHub) -> None:
    """Keep `systemctl status k25-ctl` current; ping the watchdog when WatchdogSec is set."""
    usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
    period = usec / 2e6 if usec else 60.0  # without a watchdog: refresh the "ready 3m" age now and then
    updates = hub.subscribe()
    pending: asyncio.Task[HostStatus] | None = None
    while True:
        pending = pending or asyncio.ensure_future(anext(updates))
        done, _ = await asyncio.wait({pending}, timeout=period)
        if pending in done:
            pending = None
        sd_notify(f"STATUS={describe(hub.status)}")
        if usec:
            sd_notify("WATCHDOG=1")


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


@dataclass
class HostPorts:
    """What the daemon uses of the machine; tests hand in fakes, `real_ports` builds the real ones."""

    systemd: SystemdPort
    journal: JournalPort
    gpus: GpuView
    teardown: Teardown
    prober: EnginePort
    bench_http: HttpFactory = field(default=lambda n, t: new_client(t, n))  # the benchmark's requests


def real_ports(settings: Settings) -> HostPorts:
    gpus = build_gpus(settings)
    return HostPorts(
        systemd=SdbusSystemd(open_system_bus()),  # one bus for the process, opened in the lifespan
        journal=JournalctlJournal(settings.journal_command),
        gpus=gpus,
        teardown=build_teardown(settings, gpus),
        prober=Prober(),
    )


def create_app(settings: Settings, ports: Callable[[Settings], HostPorts] = real_ports) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.token = load_token(settings.token_path)
        app.state.reads_require_token = settings.reads_require_token
        store = await asyncio.to_thread(Store.open, settings.database_path)
        host = ports(settings)
        inventory = Inventory(settings, host.systemd)
        inventory.sampler = HostSampler(
            host.gpus,
            host.teardown,
            lambda: tuple(lp.profile.unit for lp in inventory.profiles.valid.values()),
            gpu_every_s=settings.gpu_sample_s,
            strays_every_s=settings.strays_sample_s,
        )
        profiles = await inventory.reload_profiles()
        recorder = RunRecorder(store, StateHub())
        watch = ServingWatch(
            settings=settings,
            systemd=host.systemd,
            journal=host.journal,
            engines=host.prober,
            recorder=recorder,
            profiles=lambda: inventory.profiles,
        )
        switcher = Switcher(
            profiles=inventory.reload_profiles,
            ports=SwitchPorts(host.systemd, host.journal, host.teardown, host.prober),
            store=store,
            recorder=recorder,
            default_profile=settings.default_profile,
            stop_timeout_s=settings.stop_timeout_s,
            write_launch=lambda lp, run_id, argv: write_launch(settings, lp, run_id=run_id, argv=argv),
            serving=watch,
        )
        watch.policies.switcher = switcher
        warmer = Warmer(PageCache(), mem_available=mem_available, reserve=settings.warm_reserve_bytes,
                        workers=settings.warm_workers, block=settings.warm_block_bytes)  # fmt: skip
        warms = WarmService(warmer, recorder, lambda: inventory.profiles, every_s=settings.residency_every_s,
                            always_below=settings.warm_always_below)  # fmt: skip
        switcher.warm = warms.before_start
        jobs = Jobs(recorder.hub)
        switcher.gate = jobs.busy_reason
        runner = BenchmarkRunner(
            recorder=recorder,
            bench_store=BenchStore(store),
            http=host.bench_http,
            hardware=_hardware(host.gpus),
        )
        benchmarks = Benchmarks(
            runner=runner,
            jobs=jobs,
            recorder=recorder,
            switcher=switcher,
            profiles=inventory.reload_profiles,
            bench_store=runner.bench_store,
            default_profile=settings.default_profile,
        )
        benchmarks.warm = warms.start
        controller = Controller(
            inventory=inventory,
            switcher=switcher,
            recorder=recorder,
            teardown=host.teardown,
            default_profile=settings.default_profile,
            watch=watch,
            bench=BenchController(benchmarks),
            jobs=jobs,
            warms=warms,
        )
        controller.reconciled = await reconcile(
            profiles, systemd=host.systemd, recorder=recorder, serving=watch
        )
        rec = controller.reconciled
        await switcher.after_restart(rec.resume or rec.restore, resume=rec.resume is not None)
        inventory.unit_cache = lambda: watch.unit_states
        inventory.sampler.maintenance = watch.retention
        watch.follow_units()
        await inventory.sampler.start()
        warms.start_refresh()
        app.state.controller = controller
        hub = recorder.hub
        warnings = [f"runs database: {store.recovered}"] if store.recovered else []
        if access := await asyncio.to_thread(host.teardown.procs.access_problem):
            warnings.append(access)
        for w in warnings:
            log.error("%s", w)
        if warnings:
            hub.update(warnings=tuple(warnings))
        sd_notify(f"READY=1\nSTATUS={describe(hub.status)}")
        notifier = asyncio.create_task(_notify_status(hub))
        with _reload_on_sighup(controller):
            yield
        app.state.sse.stopping.set()
        notifier.cancel()
        sd_notify("STOPPING=1\nSTATUS=stopping (engines keep running)")
        await watch.close()
        await warms.close()
        await inventory.sampler.close()
        log.info("stopping; engine units keep running")
        await host.prober.aclose()

    app = FastAPI(
        title="k25-ctl",
        summary="control plane of a GPU inference host",
        lifespan=lifespan,
        docs_url=None,  # served by http.install from the daemon's own Swagger UI copy
        redoc_url=None,
    )
    app.state.sse = SseGate(settings.max_sse_streams)
    install(app, settings)

    @app.get("/healthz")
    async def healthz() -> HealthOut:
        return HealthOut(status="ok")

    app.include_router(routes.pages)
    # Writes first: for a method a path does not take, the 405's Allow header names the first route whose
    # path matches (POST /profiles/reload, not GET /profiles/{name}).
    app.include_router(routes.writes)
    app.include_router(routes.router)
    app.state.api_routes = [*routes.writes.routes, *routes.router.routes]  # for the 405's Allow header
    return app
