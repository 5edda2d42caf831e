"""`k25-ctl serve`: one uvicorn process. The socket is bound before the app starts, so READY=1 (sent at
the end of the lifespan's start) means connections are accepted."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from types import FrameType

import uvicorn

from daemon.api.app import create_app
from daemon.api.http import SseGate
from daemon.core.logs import setup_logging
from daemon.core.settings import Settings


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

    async def main_loop(self) -> None:
        """uvicorn's loop wakes 10 times a second to look for an exit; an idle daemon should not: this one
        waits for the exit signal itself and refreshes the Date header once a second."""
        while not await self.on_tick(0):  # counter 0: the Date header and the exit check, every time
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), timeout=1.0)


def serve(settings: Settings) -> None:
    setup_logging()
    app = create_app(settings)
    # log_config=None: uvicorn's own lines go through the daemon's journal-aware logging.
    # Open event streams get 1 s after a stop before uvicorn cancels them: a restart never waits on a tab.
    config = uvicorn.Config(
        app, log_level="info", access_log=False, log_config=None, timeout_graceful_shutdown=1
    )
    server = _Server(config, app.state.sse)
    if settings.unix_socket is not None:
        settings.unix_socket.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(settings.unix_socket))
    else:
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP (without it,
        # back-to-back requests on one connection wait ~40 ms on Nagle + delayed ACK).
        family = socket.AF_INET6 if ":" in settings.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.bind_host, settings.port))
    sock.listen(128)
    server.run(sockets=[sock])
