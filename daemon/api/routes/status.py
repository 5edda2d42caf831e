"""The host now: GET /status, GET /events (server-sent state changes), GET /metrics (Prometheus)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from daemon.api.http import SseGate
from daemon.api.routes.common import Responses, StatusCtl, errors, reads
from daemon.api.schemas import ReadyOut, StatusOut

read = reads("status")
balancer = APIRouter(tags=["status"], responses=errors(400, 422))  # no token: a balancer's health check
SSE: Responses = {200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}}
TEXT: Responses = {200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}}


@balancer.head("/ready", include_in_schema=False)
@balancer.get(
    "/ready",
    responses={
        200: {"model": ReadyOut, "description": "in rotation: the profile that serves, and its port"},
        503: {"model": ReadyOut, "description": "out of rotation: the reason says why"},
    },
)
async def ready(
    c: StatusCtl,
    port: Annotated[int | None, Query(ge=1, le=65535, description="200 only if served here")] = None,
) -> JSONResponse:
    """The load balancer's check: 200 while the host serves and is in rotation, 503 otherwise (draining,
    switching, an experiment, idle, failed...). `?port=P`: 200 only while the active engine serves on P."""
    out = c.ready(port)
    return JSONResponse(out.model_dump(mode="json"), status_code=200 if out.ready else 503)


@read.get("/status", response_model=StatusOut, responses={304: {"description": "unchanged (If-None-Match)"}})
async def status(c: StatusCtl, request: Request) -> Response:
    """Served from a snapshot serialized once per change, with an ETag (`If-None-Match` gets a 304)."""
    body, etag = await c.view.body()
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers={"ETag": etag})
    return Response(body, media_type="application/json", headers={"ETag": etag})


@read.get("/events", response_class=StreamingResponse, responses=SSE)
async def host_events(c: StatusCtl, request: Request) -> StreamingResponse:
    gate: SseGate = request.app.state.sse
    return gate.stream(c.host_events(), "state")


@read.get("/metrics", response_class=Response, responses=TEXT)
async def metrics(c: StatusCtl) -> Response:
    return Response(await c.metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")
