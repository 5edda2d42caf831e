"""Runs: the record of every switch, serving period, benchmark, warm and teardown; their events live
(server-sent), their serving metrics, and the one cancel."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Query, Request
from fastapi.responses import StreamingResponse

from daemon.api.http import SseGate
from daemon.api.routes.common import MAX_ID, Limit, RunId, RunsCtl, reads, writes
from daemon.api.routes.status import SSE
from daemon.api.schemas import CancelOut, RunMetricsOut, RunOut
from daemon.core.run_types import RunEventJson

read = reads("runs", "/runs")
write = writes("runs", "/runs")


@read.get("")
async def runs(
    c: RunsCtl,
    profile: str | None = None,
    parent: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="only the runs linked to this one")
    ] = None,
    limit: Limit = 50,
) -> list[RunOut]:
    return await c.runs(profile=profile, parent=parent, limit=limit)


@read.get("/{run_id}")
async def run(run_id: RunId, c: RunsCtl) -> RunOut:
    return await c.run(run_id)


@read.get("/{run_id}/metrics")
async def run_metrics(run_id: RunId, c: RunsCtl) -> RunMetricsOut:
    return await c.run_metrics(run_id)


@read.get("/{run_id}/events", response_class=StreamingResponse, responses=SSE)
async def run_events(run_id: RunId, c: RunsCtl, request: Request) -> StreamingResponse:
    events = c.run_events(run_id)
    first = await anext(events)  # a wrong run id is a 404 before the stream starts

    async def chained() -> AsyncIterator[RunEventJson]:
        yield first
        async for e in events:
            yield e

    gate: SseGate = request.app.state.sse
    return gate.stream(chained(), "phase")


@write.post("/{run_id}/cancel", status_code=202)
async def cancel(run_id: RunId, c: RunsCtl) -> CancelOut:
    return await c.cancel(run_id)
