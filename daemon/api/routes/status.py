"""The host now: GET /status, GET /events (server-sent state changes), GET /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import Request, Response
from fastapi.responses import StreamingResponse

from daemon.api.http import SseGate
from daemon.api.routes.common import Ctl, Responses, reads
from daemon.api.schemas import StatusOut

read = reads("status")
SSE: Responses = {200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}}
TEXT: Responses = {200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}}


@read.get("/status")
async def status(c: Ctl) -> StatusOut:
    return await c.status()


@read.get("/events", response_class=StreamingResponse, responses=SSE)
async def host_events(c: Ctl, request: Request) -> StreamingResponse:
    gate: SseGate = request.app.state.sse
    return gate.stream(c.host_events(), "state")


@read.get("/metrics", response_class=Response, responses=TEXT)
async def metrics(c: Ctl) -> Response:
    return Response(await c.metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")
