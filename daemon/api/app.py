"""The FastAPI app factory. The lifespan builds the real host ports (one D-Bus connection per process)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from daemon.errors import K25Error
from daemon.host.notify import sd_notify
from daemon.host.systemd import SdbusSystemd, open_system_bus
from daemon.inventory import Inventory
from daemon.settings import Settings
from daemon.wiring import build_gpus


def create_app(settings: Settings) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        systemd = SdbusSystemd(open_system_bus())
        inventory = Inventory(settings, systemd, build_gpus(settings))
        await inventory.reload_profiles()
        app.state.inventory = inventory
        sd_notify("READY=1\nSTATUS=idle")
        yield
        sd_notify("STOPPING=1")

    app = FastAPI(title="k25-ctl", lifespan=lifespan)

    @app.exception_handler(K25Error)
    async def _k25_error(_: Request, exc: K25Error) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/status")
    async def status(request: Request) -> dict[str, Any]:
        inv: Inventory = request.app.state.inventory
        return {
            "state": "idle",
            "profiles": inv.profile_summaries(),
            "units": await inv.unit_states(),
            "gpus": await inv.gpus(),
        }

    return app
