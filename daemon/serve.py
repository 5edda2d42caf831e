"""`k25-ctl serve`: one uvicorn process. The socket is bound before the app starts, so READY=1 (sent at
the end of the lifespan's start) means connections are accepted."""

from __future__ import annotations

import socket

import uvicorn

from daemon.api.app import create_app
from daemon.logs import setup_logging
from daemon.settings import Settings


def serve(settings: Settings) -> None:
    setup_logging()
    app = create_app(settings)
    # log_config=None: uvicorn's own lines go through the daemon's journal-aware logging.
    config = uvicorn.Config(app, log_level="info", access_log=False, log_config=None)
    server = uvicorn.Server(config)
    if settings.unix_socket is not None:
        settings.unix_socket.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(settings.unix_socket))
    else:
        sock = socket.socket(
            socket.AF_INET6 if ":" in settings.bind_host else socket.AF_INET, socket.SOCK_STREAM
        )
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((settings.bind_host, settings.port))
    sock.listen(128)
    server.run(sockets=[sock])
