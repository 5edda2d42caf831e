"""`k25-ctl serve`: one uvicorn process. The socket is bound before the app starts, so READY=1 (sent at
the end of the lifespan's start) means connections are accepted."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI

from daemon.api.http import SseGate
from daemon.core.logs import setup_logging
from daemon.startup import preflight
from daemon.startup.app import create_app
from daemon.startup.header_limit import HeadLimitedProtocol

log = logging.getLogger("k25.start")


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, gate: SseGate) -> None:
        super().__init__(config)
        self.gate = gate
        self._exit = asyncio.Event()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Open event streams end at once (not after the graceful timeout): a restart never waits on a tab.
        self.gate.stopping.set()
        super().handle_exit(sig, frame)
        self._exit.set()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        freeze_startup_heap()

    async def main_loop(self) -> None:
        """uvicorn's loop wakes 10 times a second to look for an exit; an idle daemon should not: this one
        waits for the exit signal itself and refreshes the Date header once a second."""
        while not await self.on_tick(0):  # counter 0: the Date header and the exit check, every time
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), timeout=1.0)


def freeze_startup_heap() -> None:
    """What start-up built (the modules, the app, the services) lives as long as the daemon: it is moved
    out of the garbage collector's reach, so that a full collection walks only what was allocated since.
    Without it each full collection walked the ~170k objects of the imports, and the read that happened to
    trigger one took ~100 ms (perf/history.py over a year: GET /runs?limit=50 p50 4 ms, 2 reads of 600 at
    108 ms). Python's gc.freeze, for long-lived servers."""
    gc.collect()
    gc.freeze()
    log.info("%d start-up objects frozen out of the garbage collector", gc.get_freeze_count())


def serve() -> int:
    """The daemon: checks before it serves (preflight.py), then one uvicorn process until a stop. A
    refused configuration is one line at priority err and EXIT_CONFIG, never a traceback."""
    setup_logging()
    try:
        settings = preflight.settings()
        preflight.check(settings)
        sock = preflight.bind(settings)
    except preflight.ConfigRefused as e:
        log.error("refusing to start: %s", e)
        return preflight.EXIT_CONFIG
    app = create_app(settings)
    _Server(uvicorn_config(app), app.state.sse).run(sockets=[sock])
    return 0


KEEP_ALIVE_S = 75  # seconds; nginx's default, well above the clients' 5


def uvicorn_config(app: FastAPI) -> uvicorn.Config:
    """How the daemon's one uvicorn serves. log_config=None: uvicorn's own lines go through the daemon's
    journal-aware logging. Open event streams get 1 s after a stop before uvicorn cancels them: a restart
    never waits on a tab. httptools: the C parser (a mirror's 500 requests/s cost h11 half a core), with
    the request's head capped (header_limit.py); the loop stays asyncio's. Idle keep-alive connections are
    kept KEEP_ALIVE_S, longer than clients keep them (httpx: 5 s, uvicorn's own default): a client never
    reuses a connection the server is closing at that moment (seen as "Server disconnected without sending
    a response" on a loaded host)."""
    return uvicorn.Config(
        app,
        http=HeadLimitedProtocol,
        loop="asyncio",
        log_level="info",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=1,
        timeout_keep_alive=KEEP_ALIVE_S,
    )
