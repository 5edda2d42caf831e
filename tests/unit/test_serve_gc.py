"""The daemon's uvicorn server freezes what start-up built out of the garbage collector (serve.py): a full
collection then walks only what was allocated since, instead of the ~170k objects of the imports (about
90 ms each: the ~100 ms reads perf/history.py saw over a year's database)."""

from __future__ import annotations

import gc
import socket
import threading
import time

from fastapi import FastAPI

from daemon.api.http import SseGate
from daemon.startup.serve import _Server, uvicorn_config
from tests.waiting import eventually_sync


def test_the_server_freezes_its_start_up_heap() -> None:
    gc.unfreeze()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(FastAPI())
    config.lifespan = "off"
    server = _Server(config, SseGate(4))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    try:
        thread.start()
        # `started` is set at the end of uvicorn's start-up; the freeze follows it
        frozen = eventually_sync(
            gc.get_freeze_count, what="the start-up heap frozen", within_s=20, every_s=0.01
        )
        assert frozen > 10_000, frozen  # the modules, the app: all that start-up made
        began = time.perf_counter()
        gc.collect()
        assert gc.get_count()[2] == 0
        print(
            f"{frozen} objects frozen; a full collection then took {(time.perf_counter() - began) * 1000:.1f} ms"
        )
    finally:
        server.should_exit = True
        server._exit.set()  # its main loop waits on this, not on should_exit alone
        thread.join(10)
        gc.unfreeze()  # the rest of this test process collects as before
