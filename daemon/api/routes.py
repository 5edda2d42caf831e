"""Thin routes: parse, call one Controller method, return its schema."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response, Security
from fastapi import Path as ApiPath
from fastapi.responses import HTMLResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from daemon.api import auth
from daemon.api.bench_schemas import BenchmarkOut, CompareOut, ExperimentOut
from daemon.api.controller import Controller
from daemon.api.http import SseGate
from daemon.api.schemas import (
    AcceptedOut,
    CancelOut,
    ErrorOut,
    ProfileOut,
    ReloadOut,
    RunMetricsOut,
    RunOut,
    StatusOut,
    TeardownPlanOut,
    TeardownRunOut,
)
from daemon.benchmark.experiments import ExperimentRequest
from daemon.benchmark.spec import BenchmarkSpec


def controller(request: Request) -> Controller:
    c: Controller = request.app.state.controller
    return c


# Declared for OpenAPI (the security scheme); the check itself is auth.check's constant-time compare.
bearer = HTTPBearer(auto_error=False, description="the token in /etc/k25-ctl/token (mode 0600)")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def write_access(request: Request, _: Bearer) -> None:
    auth.check(request, request.app.state.token)


def read_access(request: Request) -> None:
    """Reads are open unless reads_require_token: http.install marks their bearer as optional in OpenAPI."""
    if request.app.state.reads_require_token:
        auth.check(request, request.app.state.token)


def _errors(*codes: int) -> Responses:
    why = {
        400: "Host header not allowed",
        401: "missing or wrong bearer token",
        404: "no such profile or run",
        409: "busy: another switch runs, or the host refuses",
        413: "request body too large",
        422: "invalid input",
        503: "overloaded, or the database or GPUs cannot be read",
    }
    return {c: {"model": ErrorOut, "description": why[c]} for c in codes}


Responses = dict[int | str, dict[str, Any]]
INDEX = Path(__file__).with_name("templates") / "index.html"
Ctl = Annotated[Controller, Depends(controller)]
RunId = Annotated[int, ApiPath(ge=1, le=2**63 - 1, description="a run's id")]
COMMON = (400, 401, 413, 422, 503)
router = APIRouter(dependencies=[Depends(read_access)], responses=_errors(*COMMON, 404))
writes = APIRouter(dependencies=[Depends(write_access)], responses=_errors(*COMMON, 404, 409))
pages = APIRouter()  # the page itself is static: it asks for the token when it needs one
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


@writes.post("/profiles/{name}/warm", status_code=202)
async def warm(name: str, c: Ctl, response: Response) -> AcceptedOut:
    """Read its weight files into the page cache: a run of kind `warm`, its events carry MiB and %."""
    return _located(await c.warm(name), response, "/runs")


@writes.post("/restore", status_code=202, responses=SWITCH)
async def restore(c: Ctl, response: Response, wait: bool = False) -> AcceptedOut | RunOut:
    return _accepted(await c.restore(wait=wait), response)


@router.get("/runs")
async def runs(
    c: Ctl,
    profile: str | None = None,
    parent: Annotated[int | None, Query(ge=1, description="only the runs linked to this one")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[RunOut]:
    return await c.runs(profile=profile, parent=parent, limit=limit)


@router.get("/runs/{run_id}")
async def run(run_id: RunId, c: Ctl) -> RunOut:
    return await c.run(run_id)


@router.get("/runs/{run_id}/metrics")
async def run_metrics(run_id: RunId, c: Ctl) -> RunMetricsOut:
    return await c.run_metrics(run_id)


def _sse(request: Request, events: AsyncIterator[dict[str, Any]], name: str) -> StreamingResponse:
    gate: SseGate = request.app.state.sse
    return gate.stream(events, name)


@router.get("/runs/{run_id}/events", response_class=StreamingResponse, responses=SSE)
async def run_events(run_id: RunId, c: Ctl, request: Request) -> StreamingResponse:
    events = c.run_events(run_id)
    first = await anext(events)  # a wrong run id is a 404 before the stream starts

    async def chained() -> AsyncIterator[dict[str, Any]]:
        yield first
        async for e in events:
            yield e

    return _sse(request, chained(), "phase")


@router.get("/events", response_class=StreamingResponse, responses=SSE)
async def host_events(c: Ctl, request: Request) -> StreamingResponse:
    return _sse(request, c.host_events(), "state")


@writes.post("/runs/{run_id}/cancel", status_code=202)
async def cancel(run_id: RunId, c: Ctl) -> CancelOut:
    return await c.cancel(run_id)


@router.get("/teardown/plan")
async def teardown_plan(c: Ctl) -> TeardownPlanOut:
    return await c.teardown_plan()


@writes.post("/teardown")
async def teardown(c: Ctl) -> TeardownRunOut:
    return await c.run_teardown()


def _located(out: AcceptedOut, response: Response, where: str) -> AcceptedOut:
    response.headers["Location"] = f"{where}/{out.run_id}"
    return out


ACCEPTED: Responses = {202: {"model": AcceptedOut, "description": "started: its run id, Location names it"}}
Limit = Annotated[int, Query(ge=1, le=1000)]


@writes.post("/benchmarks", status_code=202, responses=ACCEPTED)
async def start_benchmark(spec: BenchmarkSpec, c: Ctl, response: Response) -> AcceptedOut:
    return _located(await c.bench.start(spec), response, "/benchmarks")


@router.get("/benchmarks")
async def benchmarks(c: Ctl, profile: str | None = None, limit: Limit = 50) -> list[BenchmarkOut]:
    return await c.bench.benchmarks(profile=profile, limit=limit)


@router.get("/benchmarks/{run_id}")
async def benchmark(run_id: RunId, c: Ctl, requests: bool = False) -> BenchmarkOut:
    return await c.bench.benchmark(run_id, requests=requests)


@router.get("/benchmarks/{run_id}/export")
async def export_benchmark(run_id: RunId, c: Ctl) -> list[dict[str, Any]]:
    """The levels as `vllm bench serve --save-result` JSON objects (for existing plotting scripts)."""
    return await c.bench.export(run_id)


@writes.post("/experiments", status_code=202, responses=ACCEPTED)
async def start_experiment(req: ExperimentRequest, c: Ctl, response: Response) -> AcceptedOut:
    return _located(await c.bench.start_experiment(req), response, "/experiments")


@router.get("/experiments")
async def experiments(c: Ctl, limit: Limit = 50) -> list[ExperimentOut]:
    return await c.bench.experiments(limit=limit)


@router.get("/experiments/{run_id}")
async def experiment(run_id: RunId, c: Ctl) -> ExperimentOut:
    return await c.bench.experiment(run_id)


@router.get("/compare")
async def compare(
    c: Ctl,
    baseline: Annotated[str, Query(max_length=200)] = "baseline",
    benchmark_spec: Annotated[str | None, Query(max_length=64, description="a spec hash")] = None,
) -> CompareOut:
    return await c.bench.compare(baseline=baseline, spec_hash=benchmark_spec)
