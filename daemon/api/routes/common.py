"""What every route module shares: the controllers as dependencies, read and write access, the error responses
documented in OpenAPI, and the Location header of an accepted run."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response, Security
from fastapi import Path as ApiPath
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from daemon.api import auth
from daemon.api.controllers import Controllers
from daemon.api.controllers.bench import BenchController
from daemon.api.controllers.gpus import GpusController
from daemon.api.controllers.profiles import ProfilesController
from daemon.api.controllers.runs import RunsController
from daemon.api.controllers.status import StatusController
from daemon.api.controllers.teardown import TeardownController
from daemon.api.schemas import AcceptedOut, ErrorOut, RunOut
from daemon.core.jsontypes import ForeignJson


# Dependencies are coroutines: FastAPI runs a plain `def` one in its thread pool, a hand-off per request.
def _controllers(request: Request) -> Controllers:
    c: Controllers = request.app.state.controllers
    return c


async def status_controller(request: Request) -> StatusController:
    return _controllers(request).status


async def profiles_controller(request: Request) -> ProfilesController:
    return _controllers(request).profiles


async def runs_controller(request: Request) -> RunsController:
    return _controllers(request).runs


async def teardown_controller(request: Request) -> TeardownController:
    return _controllers(request).teardown


async def bench_controller(request: Request) -> BenchController:
    return _controllers(request).bench


async def gpus_controller(request: Request) -> GpusController:
    return _controllers(request).gpus


# Declared for OpenAPI (the security scheme); the check itself is auth.check's constant-time compare.
bearer = HTTPBearer(auto_error=False, description="the token in /etc/k25-ctl/token (mode 0600)")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


async def write_access(request: Request, _: Bearer) -> None:
    auth.check(request, request.app.state.token)


async def read_access(request: Request) -> None:
    """Reads are open unless reads_require_token: http.install marks their bearer as optional in OpenAPI."""
    if request.app.state.reads_require_token:
        auth.check(request, request.app.state.token)


Responses = dict[int | str, ForeignJson]  # FastAPI's `responses=` shape (OpenAPI objects)


def errors(*codes: int) -> Responses:
    why = {
        400: "Host header not allowed",
        401: "missing or wrong bearer token",
        404: "no such profile or run",
        409: "busy: another switch, teardown or job runs; the host refuses; or the run is not running",
        413: "request body too large",
        422: "invalid input",
        503: "overloaded, or the database or GPUs cannot be read",
    }
    return {c: {"model": ErrorOut, "description": why[c]} for c in codes}


COMMON = (400, 401, 413, 422, 503)


def reads(tag: str, prefix: str = "") -> APIRouter:
    return APIRouter(
        prefix=prefix, tags=[tag], dependencies=[Depends(read_access)], responses=errors(*COMMON, 404)
    )


def writes(tag: str, prefix: str = "") -> APIRouter:
    return APIRouter(
        prefix=prefix, tags=[tag], dependencies=[Depends(write_access)], responses=errors(*COMMON, 404, 409)
    )


StatusCtl = Annotated[StatusController, Depends(status_controller)]
ProfilesCtl = Annotated[ProfilesController, Depends(profiles_controller)]
RunsCtl = Annotated[RunsController, Depends(runs_controller)]
TeardownCtl = Annotated[TeardownController, Depends(teardown_controller)]
BenchCtl = Annotated[BenchController, Depends(bench_controller)]
GpusCtl = Annotated[GpusController, Depends(gpus_controller)]
MAX_ID = 2**63 - 1  # SQLite's INTEGER: a larger id reaches no row, and must not reach SQLite
RunId = Annotated[int, ApiPath(ge=1, le=MAX_ID, description="a run's id")]
Limit = Annotated[int, Query(ge=1, le=1000)]
ACCEPTED: Responses = {202: {"model": AcceptedOut, "description": "started: its run id, Location names it"}}


def located(out: AcceptedOut, response: Response, where: str) -> AcceptedOut:
    response.headers["Location"] = f"{where}/{out.run_id}"
    return out


def accepted(answer: AcceptedOut | RunOut, response: Response) -> AcceptedOut | RunOut:
    """A switch's answer: 202 with Location, or 200 when nothing started (already active) or it ended."""
    run_id = answer.id if isinstance(answer, RunOut) else answer.run_id
    if run_id is not None:
        response.headers["Location"] = f"/runs/{run_id}"
    if isinstance(answer, RunOut) or run_id is None:
        response.status_code = 200
    return answer
