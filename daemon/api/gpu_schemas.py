"""The GPU health API's models: each GPU's readings, state and events; a reset's plan; the doctor's checks."""

from __future__ import annotations

from pydantic import BaseModel, Field

from daemon.api.out import Out, SafeText
from daemon.api.teardown_schemas import VictimOut


class GpuEventOut(Out):
    at: float
    gpu: int | None
    bus_id: str | None
    source: str  # nvml | kernel | nvml+kernel | k25-ctl
    kind: str  # xid | ecc_double | ecc_single | lost | d_state
    code: int
    pid: int | None
    message: SafeText
    meaning: str  # what the Xid means and NVIDIA's action (the catalog's row)


class GpuHealthOut(Out):
    index: int
    bus_id: str
    uuid: str
    state: str  # healthy | degraded | needs_reset
    reasons: list[str]
    lost: bool
    readings: dict[str, int | float | bool | None]  # None: not supported by this GPU or driver
    unsupported: list[str]
    slowdowns: list[str] | None
    events: list[GpuEventOut]  # its latest


class GpusOut(Out):
    gpus: list[GpuHealthOut]
    read_ms: float | None  # how long the last reading of all GPUs took
    read_error: str | None
    events: str  # what the driver's event source registered for


class GpuSelectIn(BaseModel):
    gpus: list[int] | None = Field(default=None, description="GPU indices; none: every GPU")
    force: bool = False
    note: str = Field(default="", max_length=500)


class ResetPlanOut(Out):
    gpus: list[int]
    engines: list[str]
    holders: list[VictimOut]
    command: list[str]
    refused: str | None


class DoctorCheckOut(Out):
    name: str
    status: str  # pass | warn | fail
    detail: SafeText
    fix: str


class DoctorOut(Out):
    ok: bool  # no check failed
    checks: list[DoctorCheckOut]
