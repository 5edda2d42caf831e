"""The REST routes, one module per capability (status, profiles, runs, teardown, benchmarks), each thin:
parse, call one controller method, return its schema. `include` mounts them in the order the 405's
Allow header needs."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from daemon.api.routes import benchmarks, capture, gpus, profiles, runs, status, teardown

INDEX = Path(__file__).resolve().parent.parent / "templates" / "index.html"
STATIC = Path(__file__).resolve().parent.parent / "static"  # the page's script, styles and vendored uPlot
pages = APIRouter()  # the page itself is static: it asks for the token when it needs one


@pages.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index() -> HTMLResponse:
    return HTMLResponse(INDEX.read_text(encoding="utf-8"))


WRITES = (
    profiles.write,
    profiles.restoring,
    runs.write,
    teardown.write,
    benchmarks.write,
    capture.write,
    gpus.write,
)
READS = (
    status.balancer,
    status.read,
    profiles.host_read,
    profiles.read,
    runs.read,
    teardown.read,
    benchmarks.read,
    capture.read,
    gpus.read,
)


def include(app: FastAPI) -> None:
    app.include_router(pages)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # Writes first: for a method a path does not take, the 405's Allow header names the first route whose
    # path matches (POST /profiles/reload, not GET /profiles/{name}).
    for router in (capture.sink, *WRITES, *READS):
        app.include_router(router)
    app.state.api_routes = [r for router in (capture.sink, *WRITES, *READS) for r in router.routes]
