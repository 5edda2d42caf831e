"""Response models of the benchmark, experiment and comparison routes. A level's `summary` keeps
`vllm bench serve`'s key names (its acceptance rate in percent), beside k25-ctl's own (fractions)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from daemon.api.schemas import AgreementOut, Out, SafeArgv, SafeOptionalText, SafeText
from daemon.core.jsontypes import RequestRow, StoredJson, VllmSummary
from daemon.core.profiles import NAME_RE
from daemon.experiments.compare import Row
from daemon.experiments.verdict_types import Verdict


class ProvenanceOut(Out):
    profile: str | None = None
    profile_sha256: str | None = None
    argv: SafeArgv | None = None
    serving_run_id: int | None = None
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    drafter: str | None = None
    gpus: list[int] = Field(default_factory=list)
    gpu_names: list[str] = Field(default_factory=list)
    driver: str | None = None
    spec_hash: str | None = None
    prompt_hash: str | None = None
    k25_ctl_version: str | None = None
    # A dataset's replay: which one, how its output lengths were chosen, and the pace of its arrivals.
    dataset: str | None = None
    dataset_sha256: str | None = None
    output_lengths: str | None = None
    ignore_eos: bool | None = None
    pace: float | None = None
    # Figures measured elsewhere (POST /benchmark-imports): the tool and the importer's label.
    imported: dict[str, str] | None = None


class BenchmarkLevelOut(BaseModel):
    concurrency: int | None
    request_rate: float | None
    summary: VllmSummary
    requests: list[RequestRow] | None = None  # with ?requests=true
    # From the per-position acceptance rates (vLLM): the mean acceptance length had k' tokens been
    # drafted, for every k' below the number drafted (1 + p_0 + ... + p_(k'-1)).
    predicted_acceptance_length: dict[int, float] | None = None


class RelativeOut(Out):
    """Output throughput over the median of the host's last 5 benchmarks of the same profile and spec."""

    throughput: float
    baseline: float
    baseline_runs: int
    ratio: float


class GateOut(BaseModel):
    """A gate benchmark's verdict against the host's own normal (its spec's `gate`)."""

    min_relative: float
    require_normal: bool
    passed: bool
    text: str


class CapacityOut(BaseModel):
    """A capacity search's answer: the highest rate proven to meet the SLO, the bracket it lies in."""

    capacity: float | None  # req/s; None: not even the lowest step met the SLO
    lowest_missed: float | None  # the bracket's upper end; None: no step missed
    estimate: float | None  # where the limiting figure meets its bound, inside the bracket
    limiting: str | None  # the summary key of the bound that gave out first (p95_tpot_ms)
    knee: float | None  # the first rate at which that figure grew faster than the rate
    reason: str  # why the search stopped (bracketed, over-saturated, the step limit)
    text: str


class BenchmarkOut(BaseModel):
    run_id: int
    profile: str | None
    outcome: str
    phase: str
    started_at: datetime
    ended_at: datetime | None
    error: SafeOptionalText
    experiment_run_id: int | None = None
    repeat: int = 0
    round: int | None = None  # the experiment's round it was measured in
    spec: StoredJson | None = None  # None while it runs (stored at its end)
    spec_hash: str | None = None
    prompt_hash: str | None = None
    provenance: ProvenanceOut | None = None
    output_throughput: float | None = None  # the first level's
    acceptance_length: float | None = None
    acceptance_rate: float | None = None
    other_traffic: bool = False
    levels: list[BenchmarkLevelOut] = []
    relative: RelativeOut | None = None  # GET /benchmarks/{id} only: against the host's own normal
    capacity: CapacityOut | None = None  # a capacity search's answer (spec.capacity)
    gate: GateOut | None = None  # GET /benchmarks/{id} only: a gate benchmark's verdict (spec.gate)
    serving_run_id: int | None = None  # the serving run it measured (its profile's activation)


class StepOut(BaseModel):
    """One profile of an experiment: its switch, its benchmarks and how each ended."""

    profile: str
    round: int = 0  # 0-based, of an experiment in rounds
    switch_run_id: int | None = None
    benchmark_run_ids: list[int] = []
    outcomes: list[str] = []
    error: str | None = None


class RoundOut(BaseModel):
    """One profile's figures in one round of an experiment (its first load level)."""

    round: int
    profile: str
    benchmark_run_ids: list[int]
    output_throughput: float | None
    acceptance_length: float | None


class RestoreOut(BaseModel):
    profile: str
    switch_run_id: int | None = None
    ok: bool = False
    error: str | None = None


class ExperimentOut(BaseModel):
    run_id: int
    outcome: str
    phase: str
    started_at: datetime
    ended_at: datetime | None
    error: SafeOptionalText
    request: StoredJson  # as posted, with the profile it restores to
    steps: list[StepOut]
    restore: RestoreOut | None = None
    answers: list[AgreementOut] = []  # each profile's known answer against the default profile's
    orders: list[list[str]] = []  # each round's order of the profiles
    verdicts: list[str] = []  # each profile against the first one ("faster: 1.07x [1.04, 1.10]"), a drift
    rounds: list[RoundOut] = []  # per round and profile (GET /experiments/ID)
    comparison: CompareOut | None = None  # its own comparison: every metric's interval (GET /experiments/ID)


class ScheduleOut(BaseModel):
    """An experiment waiting for its systemd timer."""

    id: int
    unit: str  # k25-experiment-ID.timer
    at: str  # as given: an OnCalendar= expression or a delay (+10min)
    max_running: int | None  # skipped when the engine serves more requests than this
    next_run: datetime | None
    active: bool
    request: StoredJson


class ScheduleCancelOut(BaseModel):
    id: int
    cancelled: bool = True


class CompareOut(BaseModel):
    baseline: str
    spec_hash: str | None
    prompt_hash: str | None
    gpu_key: str | None
    metric: str
    rows: list[Row]  # the comparison's own rows (experiments/compare.py)
    notes: list[str]
    answers: list[AgreementOut] = []  # each profile's known answer against the baseline's


class PlanStepOut(BaseModel):
    profile: str
    values: dict[str, bool | int | float | str]
    argv: SafeArgv
    switch_s: float | None
    benchmark_s: float | None


class PlanOut(BaseModel):
    """A sweep's plan: what would run, in that order, and about how long it takes (nothing started)."""

    base: str
    steps: list[PlanStepOut]
    switches: int
    estimate_s: float | None
    notes: list[SafeText]


class SwitchPlanIn(BaseModel):
    """`POST /plans` for a plain switch: what activating `activate` would do now (nothing started)."""

    model_config = ConfigDict(extra="forbid")

    activate: str = Field(min_length=1, max_length=200, description="the profile an activate would switch to")
    drain: bool = True
    force: bool = False


class SwitchPlanOut(BaseModel):
    """What the activate would do: `switch` false when the profile already serves (or it is refused)."""

    model_config = ConfigDict(from_attributes=True)

    profile: str
    from_profile: str | None
    state: str
    switch: bool
    reason: SafeText
    refused: SafeOptionalText
    away: str | None
    start: str | None
    estimate_s: float | None


class SweepRowOut(BaseModel):
    profile: str
    values: dict[str, object]
    run_ids: list[int]
    value: float | None
    cv: float | None
    samples: list[float]
    acceptance_length: float | None
    drafted: int | None
    predicted_length: float | None
    ratio: float | None
    noise: float | None
    noise_assumed: bool
    verdict: Verdict | None
    best: bool


class SweepOut(BaseModel):
    """An experiment's steps ranked by its metric: a sweep's variants with their axis values."""

    experiment_run_id: int
    base: str
    metric: str
    axes: list[str]
    rows: list[SweepRowOut]
    best: str | None
    recommendation: str | None
    promote: str | None
    predicted: dict[int, float]
    notes: list[SafeText]


class PromoteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant: str = Field(min_length=1, max_length=500)
    name: str | None = Field(
        None, pattern=NAME_RE.pattern, description="the new profile's name (default: from the values)"
    )


class PromoteOut(BaseModel):
    name: str
    file: str


# ExperimentOut names CompareOut, defined after it: built here, at import, not by the first request.
ExperimentOut.model_rebuild()
