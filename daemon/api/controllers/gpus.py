"""What the GPU routes call: each GPU's health from the watch's state (no NVML read per request), the
reset's plan and run, an acknowledgement, and the doctor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

from prometheus_client.core import Metric

from daemon.api.gpu_schemas import (
    DoctorCheckOut,
    DoctorOut,
    GpuEventOut,
    GpuHealthOut,
    GpuSelectIn,
    GpusOut,
    ResetPlanOut,
)
from daemon.api.schemas import AcceptedOut
from daemon.health.assess import Health
from daemon.health.doctor import Status
from daemon.health.doctor_run import Doctor
from daemon.health.metrics import gpu_health_metrics
from daemon.health.reset import GpuService
from daemon.health.watch import HealthWatch
from daemon.health.xid import lookup
from daemon.host.gpu_health import DriverEvent

EVENTS_PER_GPU = 10


def event_out(e: DriverEvent) -> GpuEventOut:
    meaning = lookup(e.code).describe() if e.kind == "xid" else e.kind
    return GpuEventOut(**asdict(e), meaning=meaning)


class GpusController:
    def __init__(self, *, health: HealthWatch, service: GpuService, doctor: Doctor) -> None:
        self.health = health
        self.service = service
        self.doctor_ = doctor

    def metrics(self) -> Iterator[Metric]:
        return gpu_health_metrics(self.health)

    async def gpus(self) -> GpusOut:
        h = self.health
        recent = await h.recent_events(EVENTS_PER_GPU * max(1, len(h.readings)))
        out = []
        for i in sorted(set(h.readings) | set(h.states)):
            r = h.readings.get(i)
            state, reasons = h.states.get(i, (Health.HEALTHY, []))
            out.append(
                GpuHealthOut(
                    index=i,
                    bus_id=r.bus_id if r else "",
                    uuid=r.uuid if r else "",
                    state=state.value,
                    reasons=reasons,
                    lost=bool(r and r.lost),
                    readings=dict(r.values) if r else {},
                    unsupported=list(r.unsupported) if r and not r.lost else [],
                    slowdowns=list(r.slowdowns) if r and r.slowdowns is not None else None,
                    events=[event_out(e) for e in recent if e.gpu == i][:EVENTS_PER_GPU],
                )
            )
        read_ms = None if h.read_s is None else h.read_s * 1e3
        return GpusOut(gpus=out, read_ms=read_ms, read_error=h.read_error, events=h.registration)

    async def reset_plan(self, req: GpuSelectIn) -> ResetPlanOut:
        return ResetPlanOut.model_validate(await self.service.plan(req.gpus, force=req.force))

    async def reset(self, req: GpuSelectIn) -> AcceptedOut:
        return AcceptedOut(run_id=await self.service.reset(req.gpus, force=req.force))

    async def acknowledge(self, req: GpuSelectIn) -> AcceptedOut:
        return AcceptedOut(run_id=await self.service.acknowledge(req.gpus, req.note))

    async def doctor(self) -> DoctorOut:
        found = await self.doctor_.run()
        checks = [DoctorCheckOut.model_validate(c) for c in found]
        return DoctorOut(ok=all(c.status is not Status.FAIL for c in found), checks=checks)
