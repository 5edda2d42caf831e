"""The daemon's app: the API (api/app.py) with the lifespan that builds the services (services.py: the host
ports, one D-Bus connection per process, the database upgraded), starts them (reconciled with systemd),
says READY=1, keeps `systemctl status` current, and closes them at a stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI

from daemon.api.app import create_api
from daemon.api.auth import load_token
from daemon.api.controllers.profiles import ProfilesController
from daemon.core.hoststate import HostStatus, StateHub, describe
from daemon.core.settings import Settings
from daemon.core.slow_steps import SlowStep, SlowSteps
from daemon.host.notify import sd_notify
from daemon.host.threads import wait_channel
from daemon.startup.machine import HostPorts, real_ports
from daemon.startup.services import build

log = logging.getLogger("k25.daemon")


@contextlib.contextmanager
def _reload_on_sighup(controller: ProfilesController, hub: StateHub) -> Iterator[None]:
    """`systemctl reload k25-ctl` (ExecReload sends SIGHUP): re-read the profiles folder, report it."""
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    async def reload() -> None:
        sd_notify(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")
        result = await controller.reload()
        log.info("reload: %d valid profiles, %d invalid", len(result.valid), len(result.invalid))
        sd_notify(f"READY=1\nSTATUS={describe(hub.status)}")

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


def _resolve_lazy_imports() -> None:
    """anyio imports its API on first use: on the event loop, inside a request (the first file response of
    the page imported anyio's file module there: a 265 ms step, found by slow_steps). Once, at start."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # its deprecated aliases warn when resolved
        for name in anyio.__dir__():
            if not name.startswith("_"):
                getattr(anyio, name)


def _start_worker_threads() -> None:
    """Every thread of the default executor (asyncio.to_thread's), started now: a pool that grows later
    starts its thread from the event loop, and Thread.start waits there until the OS schedules the new
    thread (100 ms and more on a busy host: every request waits with it)."""
    workers = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's own default
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="k25-worker")
    gate = threading.Barrier(workers + 1)
    for _ in range(workers):  # each waits at the gate, so the next submit finds no idle thread
        executor.submit(gate.wait, 30)
    gate.wait(30)
    asyncio.get_running_loop().set_default_executor(executor)


def _build_routes(routes: Sequence[object]) -> int:
    """FastAPI (0.165) builds an included router's routes (their dependants: signatures, pydantic schemas)
    at the first request that reaches them, on the event loop: 100 ms and more, in the middle of a request
    (the API guard's failures on busy CI runs). Built here, before serving; the routes built, counted."""
    built = 0
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)
        if candidates is None:  # a route of the app's own router: built when it was added
            continue
        built += 1 + _build_routes(candidates())
        if (low := getattr(route, "effective_low_priority_routes", None)) is not None:
            built += len(low())
    return built


def _log_slow_step(step: SlowStep) -> None:
    log.warning("slow event-loop step: %s", step)


def create_app(settings: Settings, ports: Callable[[Settings], HostPorts] = real_ports) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        slow = contextlib.ExitStack()
        if settings.slow_callback_ms is not None:  # diagnosis: each step that blocks the loop, named
            slow.enter_context(SlowSteps(settings.slow_callback_ms / 1000, _log_slow_step, wait_channel))
            log.warning(
                "event-loop steps over %g ms are logged (slow_callback_ms)", settings.slow_callback_ms
            )
        _resolve_lazy_imports()
        _start_worker_threads()
        log.debug("%d routes built before serving", _build_routes(app.router.routes))
        app.state.token = load_token(settings.token_path)
        app.state.reads_require_token = settings.reads_require_token
        services = await build(settings, ports(settings))
        await services.start()
        app.state.controllers = services.controllers
        app.state.services = services  # for diagnosis and tests; routes call only the controllers
        sd_notify(f"READY=1\nSTATUS={describe(services.hub.status)}")
        notifier = asyncio.create_task(_notify_status(services.hub))
        with _reload_on_sighup(services.controllers.profiles, services.hub):
            yield
        app.state.sse.stopping.set()
        notifier.cancel()
        sd_notify("STOPPING=1\nSTATUS=stopping (engines keep running)")
        await services.close()
        slow.close()

    return create_api(settings, lifespan)
