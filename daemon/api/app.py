"""The FastAPI app: the routes, the edges (http.py: hosts, sizes, errors, /docs) and /healthz. What it
serves comes from the lifespan it is given (startup/app.py builds and starts the services)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI

from daemon.api import routes
from daemon.api.http import SseGate, install
from daemon.api.schemas import HealthOut
from daemon.core.settings import Settings

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_api(settings: Settings, lifespan: Lifespan) -> FastAPI:
    """The lifespan sets `app.state.controllers` (what the routes call) before the first request."""
    app = FastAPI(
        title="k25-ctl",
        summary="control plane of a GPU inference host",
        lifespan=lifespan,
        docs_url=None,  # served by http.install from the daemon's own Swagger UI copy
        redoc_url=None,
        openapi_url=None,  # served by http.install too, built off the event loop
    )
    app.state.sse = SseGate(settings.max_sse_streams)
    install(app, settings)

    @app.get("/healthz")
    async def healthz() -> HealthOut:
        return HealthOut(status="ok")

    routes.include(app)
    return app
