"""Thin routes: parse, call one Controller method, return its schema."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import HTMLResponse, StreamingResponse

from daemon.api import auth
from daemon.api.schemas import (
    AcceptedOut,
    CancelOut,
    ProfileOut,
    ReloadOut,
    RunMetricsOut,
    RunOut,
    StatusOut,
    TeardownPlanOut,
    TeardownRunOut,
)
from daemon.controller import Controller


def controller(request: Request) -> Controller:
    c: Controller = request.app.state.controller
    return c


def write_access(request: Request) -> None:
    auth.check(request, request.app.state.token)


def read_access(request: Request) -> None:
    if request.app.state.reads_require_token:
        auth.check(request, request.app.state.token)


INDEX = Path(__file__).with_name("templates") / "index.html"
Ctl = Annotated[Controller, Depends(controller)]
router = APIRouter(dependencies=[Depends(read_access)])
writes = APIRouter(dependencies=[Depends(write_access)])
pages = APIRouter()  # the page itself is static: it asks for the token when it needs one
Responses = dict[int | str, dict[str, Any]]
SSE: Responses = {200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}}
TEXT: Responses = {200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}}
SWITCH: Responses = {
    200: {"model": AcceptedOut | RunOut, "description": "already active (no run), or the ended run (wait)"},
    202: {"model": AcceptedOut, "description": "the switch started: its run id, and Location: /runs/N"},
}


def _accepted(answer: AcceptedOut | RunOut, response: Response) -> AcceptedOut | RunOut:
    run_id = answer.id if isinstance(answer, RunOut) else answer.run_id
    if run_id is not None:
        response.headers["Location"] = f"/runs/{run_id}"
    if isinstance(answer, RunOut) or run_id is None:
        response.status_code = 200
    return answer


@pages.get("/", response_class=HTMLResponse, include_in_schema=False)
async def index() -> HTMLResponse:
    return HTMLResponse(INDEX.read_text(encoding="utf-8"))


@router.get("/metrics", response_class=Response, responses=TEXT)
async def metrics(c: Ctl) -> Response:
    return Response(await c.metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/status")
async def status(c: Ctl) -> StatusOut:
    return await c.status()


@router.get("/profiles")
async def profiles(c: Ctl) -> list[ProfileOut]:
    return await c.profiles()


@router.get("/profiles/{name}")
async def profile(name: str, c: Ctl) -> ProfileOut:
    return await c.profile(name)


@writes.post("/profiles/reload")
async def reload(c: Ctl) -> ReloadOut:
    return await c.reload()


@writes.post("/profiles/{name}/activate", status_code=202, responses=SWITCH)
async def activate(
    name: str, c: Ctl, response: Response, force: bool = False, wait: bool = False
) -> AcceptedOut | RunOut:
    return _accepted(await c.activate(name, force=force, wait=wait), response)


@writes.post("/restore", status_code=202, responses=SWITCH)
async def restore(c: Ctl, response: Response, wait: bool = False) -> AcceptedOut | RunOut:
    return _accepted(await c.restore(wait=wait), response)


@router.get("/runs")
async def runs(
    c: Ctl, profile: str | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = 50
) -> list[RunOut]:
    return await c.runs(profile=profile, limit=limit)


@router.get("/runs/{run_id}")
async def run(run_id: int, c: Ctl) -> RunOut:
    return await c.run(run_id)


@router.get("/runs/{run_id}/metrics")
async def run_metrics(run_id: int, c: Ctl) -> RunMetricsOut:
    return await c.run_metrics(run_id)


def _sse(events: AsyncIterator[dict[str, Any]], name: str) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        async for event in events:
            data = json.dumps(event, default=str)
            yield f"event: {event.get(name) or 'message'}\ndata: {data}\n\n".encode()

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/runs/{run_id}/events", response_class=StreamingResponse, responses=SSE)
async def run_events(run_id: int, c: Ctl) -> StreamingResponse:
    events = c.run_events(run_id)
    first = await anext(events)  # a wrong run id is a 404 before the stream starts

    async def chained() -> AsyncIterator[dict[str, Any]]:
        yield first
        async for e in events:
            yield e

    return _sse(chained(), "phase")


@router.get("/events", response_class=StreamingResponse, responses=SSE)
async def host_events(c: Ctl) -> StreamingResponse:
    return _sse(c.host_events(), "state")


@writes.post("/runs/{run_id}/cancel", status_code=202)
async def cancel(run_id: int, c: Ctl) -> CancelOut:
    return await c.cancel(run_id)


@router.get("/teardown/plan")
async def teardown_plan(c: Ctl) -> TeardownPlanOut:
    return await c.teardown_plan()


@writes.post("/teardown")
async def teardown(c: Ctl) -> TeardownRunOut:
    return await c.run_teardown()
