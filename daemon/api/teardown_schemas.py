"""Response models of the teardown: its plan, its report, and a run's teardown records."""

from __future__ import annotations

from pydantic import Field

from daemon.api.out import Out, SafeOptionalText, SafeText


class VictimOut(Out):
    pid: int
    title: SafeText
    reasons: list[str]
    foreign: bool
    gpu_mib: int | None
    started: float = 0.0
    orphan: bool = False
    gpus: list[int] = Field(default_factory=list)


class SparedOut(Out):
    pid: int
    title: SafeText
    reason: SafeText


class ShmEntryOut(Out):
    name: str
    path: str
    size: int
    uid: int
    is_file: bool
    is_symlink: bool
    users: list[int]


class ShmDecisionOut(Out):
    entry: ShmEntryOut
    reason: str


class PortHolderOut(Out):
    port: int
    pid: int | None
    title: SafeText


class TeardownPlanOut(Out):
    victims: list[VictimOut]
    spared: list[SparedOut]
    shm_remove: list[ShmDecisionOut]
    shm_keep: list[ShmDecisionOut]
    gpus: list[int] | None
    refused: list[VictimOut]
    port_blocked: list[PortHolderOut] = Field(default=[])
    gpu_error: str | None = None


class ProcessOutcomeOut(Out):
    pid: int
    title: SafeText
    reasons: list[str]
    foreign: bool
    gpu_mib: int | None
    signals: list[str]
    outcome: str
    state: str = ""
    wchan: str = ""
    orphan: bool = False
    grace_s: float = 0.0
    gpus: list[int] = Field(default_factory=list)


class GpuCheckOut(Out):
    index: int
    used_mib: int
    limit_mib: int
    pids: list[int]
    clean: bool


class VerifyOut(Out):
    ok: bool
    gpus: list[GpuCheckOut]
    samples: int
    seconds: float
    message: str


class ShmKeptOut(Out):
    name: str
    reason: str


class TeardownReportOut(Out):
    ok: bool
    processes: list[ProcessOutcomeOut]
    spared: list[SparedOut]
    shm_removed: list[str]
    shm_kept: list[ShmKeptOut]
    steps: dict[str, float]
    needs_reset: list[ProcessOutcomeOut]
    verify: VerifyOut | None
    error: SafeOptionalText


class TeardownRecordOut(Out):
    id: int
    ok: bool
    report: TeardownReportOut


class TeardownRunOut(Out):
    run_id: int
    report: TeardownReportOut
