"""The capture sink (what the balancer mirrors to: its own write-only token, never the admin token), the
capture's counts (open), its export and purge (admin); and the datasets: list, import, cut from the
capture, delete."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import StreamingResponse

from daemon.api.capture_schemas import (
    CaptureAckOut,
    CaptureOut,
    DatasetDeletedOut,
    FromCaptureIn,
    PurgedOut,
)
from daemon.api.controllers import Controllers
from daemon.api.controllers.capture import CaptureController, DatasetsController
from daemon.api.routes.common import Responses, errors, reads, writes
from daemon.api.schemas import ErrorOut
from daemon.datasets.service import NAME, DatasetInfo


async def capture_controller(request: Request) -> CaptureController:
    c: Controllers = request.app.state.controllers
    return c.capture


async def datasets_controller(request: Request) -> DatasetsController:
    c: Controllers = request.app.state.controllers
    return c.datasets


CaptureCtl = Annotated[CaptureController, Depends(capture_controller)]
DatasetsCtl = Annotated[DatasetsController, Depends(datasets_controller)]
DatasetName = Annotated[str, Path(pattern=NAME, description="a dataset's name")]

# The sink answers at once; 403 wrong capture token, 404 capture off, 413 too large.
SINK_ANSWERS: Responses = errors(400, 413, 422) | {
    403: {"model": ErrorOut, "description": "missing or wrong capture token (or none configured)"},
    404: {"model": ErrorOut, "description": "capture is off"},
}
sink = APIRouter(tags=["capture"], responses=SINK_ANSWERS)
read = reads("capture")
write = writes("capture")


async def _body(request: Request, c: CaptureController) -> bytes:
    """The request body, read no further than the capture's limit (also a chunked body, which has no length
    to refuse it by at the edge); a larger one is counted and refused."""
    limit = c.max_body_bytes
    if (length := request.headers.get("content-length", "")).isdigit() and int(length) > limit:
        raise c.too_large()
    out = bytearray()
    async for chunk in request.stream():
        out += chunk
        if len(out) > limit:
            raise c.too_large()
    return bytes(out)


# The two answers, encoded once: the sink's cost per request is what a mirror multiplies.
ACKS = {kept: CaptureAckOut(kept=kept).model_dump_json().encode() for kept in (True, False)}


@sink.post("/capture/v1/completions", status_code=202, response_model=CaptureAckOut)
@sink.post("/capture/v1/chat/completions", status_code=202, response_model=CaptureAckOut)
async def capture(request: Request, c: CaptureCtl) -> Response:
    """A mirrored production request: kept (its sampled share) for replay. Auth: the capture token. The
    answer is immediate: the row is written by the capture's writer."""
    endpoint = c.check(request.url.path, request.headers.get("authorization"))
    raw = await _body(request, c)
    kept = c.keep(endpoint, request.headers.get(c.category_header), raw)
    return Response(ACKS[kept], status_code=202, media_type="application/json")


@read.get("/capture")
async def capture_state(c: CaptureCtl) -> CaptureOut:
    """Counts only: never a captured request's text."""
    return await c.state()


NDJSON: Responses = {200: {"content": {"application/x-ndjson": {}}, "description": "one request per line"}}


@write.get("/capture/export", response_class=StreamingResponse, responses=NDJSON)
async def capture_export(c: CaptureCtl) -> StreamingResponse:
    """Every captured request as JSON lines (what `k25-ctl datasets import` reads back)."""
    return StreamingResponse(c.export(), media_type="application/x-ndjson")


@write.delete("/capture")
async def capture_purge(c: CaptureCtl) -> PurgedOut:
    """Delete every captured request (datasets cut from them stay until deleted)."""
    return await c.purge()


@read.get("/datasets")
async def datasets(c: DatasetsCtl) -> list[DatasetInfo]:
    return await c.all()


@read.get("/datasets/{name}")
async def dataset(name: DatasetName, c: DatasetsCtl) -> DatasetInfo:
    return await c.get(name)


FILE_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@write.post("/datasets", status_code=201, openapi_extra=FILE_BODY)
async def import_dataset(
    request: Request,
    c: DatasetsCtl,
    name: Annotated[str, Query(pattern=NAME)],
    format: Annotated[Literal["openai", "sharegpt"] | None, Query()] = None,
) -> DatasetInfo:
    """An OpenAI-format JSONL (vllm bench's custom dataset) or a ShareGPT JSON file, as the body."""
    return await c.import_file(name, await request.body(), format)


@write.post("/datasets/from-capture", status_code=201)
async def dataset_from_capture(req: FromCaptureIn, c: DatasetsCtl) -> DatasetInfo:
    """The captured requests of a window (of some categories) as a dataset: a copy."""
    return await c.from_capture(req)


@write.delete("/datasets/{name}")
async def delete_dataset(name: DatasetName, c: DatasetsCtl) -> DatasetDeletedOut:
    return await c.delete(name)
