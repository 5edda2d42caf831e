"""GPU health: each GPU's state, readings and events; a reset (plan, then run); an acknowledgement; the
doctor's checks of the host."""

from __future__ import annotations

from fastapi import Response

from daemon.api.gpu_schemas import DoctorOut, GpuSelectIn, GpusOut, ResetPlanOut
from daemon.api.routes.common import ACCEPTED, GpusCtl, located, reads, writes
from daemon.api.schemas import AcceptedOut

read = reads("gpus")
write = writes("gpus")


@read.get("/gpus")
async def gpus(c: GpusCtl) -> GpusOut:
    return await c.gpus()


@read.get("/doctor")
async def doctor(c: GpusCtl) -> DoctorOut:
    """The host's readiness: each check pass, warn or fail, with its fix."""
    return await c.doctor()


@write.post("/gpus/reset/plan")
async def reset_plan(req: GpuSelectIn, c: GpusCtl) -> ResetPlanOut:
    """What a reset would do: the engines it stops, what holds the GPUs, the command; why it would refuse."""
    return await c.reset_plan(req)


@write.post("/gpus/reset", status_code=202, responses=ACCEPTED)
async def reset(req: GpuSelectIn, c: GpusCtl, response: Response) -> AcceptedOut:
    """Stop the engines, tear down, run the reset command, read the GPUs again; 409 with a foreign holder."""
    return located(await c.reset(req), response, "/runs")


@write.post("/gpus/ack", status_code=202, responses=ACCEPTED)
async def acknowledge(req: GpuSelectIn, c: GpusCtl, response: Response) -> AcceptedOut:
    """Clear the GPUs' health marks without a reset (recorded as a run with the note)."""
    return located(await c.acknowledge(req), response, "/runs")
