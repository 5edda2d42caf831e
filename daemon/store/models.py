"""Tables. Every run keeps the rendered argv and the hash of its profile file, so a number can always be
traced to what produced it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import Index, LargeBinary
from sqlmodel import Column, Field, SQLModel

from daemon.core.jsontypes import StoredJson


def utcnow() -> datetime:
    return datetime.now(UTC)


class Run(SQLModel, table=True):
    __tablename__ = "runs"
    # /metrics aggregates over these without reading the table (100k runs: ~9 ms instead of ~75 ms).
    __table_args__ = (
        Index("ix_runs_kind_outcome", "kind", "outcome"),
        Index("ix_runs_outcome_profile_id", "outcome", "profile", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(index=True)  # switch | rollback | teardown
    profile: str | None = Field(default=None, index=True)
    from_profile: str | None = None
    outcome: str = Field(default="running", index=True)  # running | active | failed | cancelled | ...
    phase: str = "created"
    started_at: datetime = Field(default_factory=utcnow)
    ended_at: datetime | None = None
    load_seconds: float | None = None
    progress_percent: int | None = None
    progress_done: int | None = None
    progress_total: int | None = None
    error: str | None = None  # the journal excerpt of a failed start, or the failure's reason
    parent_id: int | None = Field(default=None, foreign_key="runs.id")
    argv: str | None = None  # JSON list
    profile_sha256: str | None = None
    unit: str | None = None
    # A serving run's totals, kept current as its metric rows are written.
    served_s: float | None = None
    requests: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    acceptance_length: float | None = None  # mean over the run (bonus token included)
    load_stages: str | None = None  # JSON {stage: seconds} as the engine printed them (and a warm before)
    # What a switch cost the clients: out of rotation (/ready 503) and back, the drain and what it cut.
    ready_down_at: datetime | None = None
    ready_up_at: datetime | None = None
    downtime_s: float | None = None
    drain_s: float | None = None
    drain_finished: int | None = None  # requests the engine finished during the drain
    drain_cut: int | None = None  # requests still running or waiting at the stop
    drain_timed_out: bool | None = None
    engine_version: str | None = None  # the engine as installed when the run began (daemon/installed/)


class RunEvent(SQLModel, table=True):
    __tablename__ = "run_events"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    at: datetime = Field(default_factory=utcnow)
    phase: str
    detail: str = ""
    # A progress step (loading, warming, measuring): a follower that joins late replays it as a bar too.
    progress_percent: int | None = None
    progress_done: int | None = None
    progress_total: int | None = None


class TeardownRecord(SQLModel, table=True):
    __tablename__ = "teardowns"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="runs.id", index=True)
    created_at: datetime = Field(default_factory=utcnow)
    ok: bool
    report: str  # JSON of the TeardownReport

    @property
    def report_data(self) -> StoredJson:
        data = json.loads(self.report)
        return data if isinstance(data, dict) else {}


class ServingMetric(SQLModel, table=True):
    """One row per minute of a serving run (compacted to one per hour later): what the engine did."""

    __tablename__ = "serving_metrics"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", index=True)
    at: datetime = Field(index=True)  # start of the period
    resolution: str = "minute"  # minute | hour
    seconds: float  # the span the deltas cover
    requests: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    tokens_per_s: float = 0.0
    running: float | None = None  # gauges: the last value seen in the period
    waiting: float | None = None
    kv_usage: float | None = None
    acceptance_rate: float | None = None  # the engine's native rate
    acceptance_length: float | None = None
    per_position: str | None = None  # JSON list of per-position acceptance (vLLM)

    @property
    def per_position_rates(self) -> list[float] | None:
        return [float(x) for x in json.loads(self.per_position)] if self.per_position else None


class Benchmark(SQLModel, table=True):
    """A benchmark run's provenance and headline figures: what exactly was measured, on what."""

    __tablename__ = "benchmarks"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", unique=True)
    profile: str = Field(index=True)
    serving_run_id: int | None = None  # plain id: the serving run may be pruned, the benchmark stays
    experiment_run_id: int | None = Field(default=None, index=True)
    repeat: int = 0
    round: int | None = None  # the experiment's round (None: outside an experiment's rounds)
    spec: str  # JSON of the BenchmarkSpec
    spec_hash: str = Field(index=True)
    prompt_hash: str
    provenance: str  # JSON: engine, version, model, drafter, GPUs, driver, argv, profile hash, k25-ctl
    gpu_key: str = ""  # GPU names and count: compare like with like
    output_throughput: float | None = None  # the first level's
    acceptance_length: float | None = None
    acceptance_rate: float | None = None  # the engine's native rate
    other_traffic: bool = False


class BenchmarkLevel(SQLModel, table=True):
    """One load level of a benchmark: its summary (vLLM's key names) and its requests (zlib JSON rows)."""

    __tablename__ = "benchmark_levels"

    id: int | None = Field(default=None, primary_key=True)
    benchmark_id: int = Field(foreign_key="benchmarks.id", index=True)
    position: int
    concurrency: int | None = None
    request_rate: float | None = None
    summary: str  # JSON
    requests: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class Experiment(SQLModel, table=True):
    """An experiment run's request and, per profile, what happened (kept current while it runs)."""

    __tablename__ = "experiments"

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="runs.id", unique=True)
    request: str  # JSON: profiles, benchmark spec, repeats, restore
    steps: str = "{}"  # JSON: {"steps": [per profile: switch run, benchmark runs, error], "restore": ...}


class ParkedEngine(SQLModel, table=True):
    """An engine asleep on purpose (parking), kept across daemon restarts: a restart readopts it as parked
    only while its unit still runs the same main process."""

    __tablename__ = "parked"

    profile: str = Field(primary_key=True)
    unit: str
    main_pid: int
    since: datetime
    level: int
    gpu_mib: str  # JSON {GPU index: MiB it still holds}
    host_ram_bytes: int
    run_id: int
    profile_sha256: str  # the profile file it runs: a changed file is started afresh, not woken


class KnownAnswer(SQLModel, table=True):
    """A profile's greedy answer to the fixed known-answer requests, recorded after a cold start ended
    active: every wake of an engine started from the same file and argv must give it token for token."""

    __tablename__ = "known_answers"
    __table_args__ = (
        Index(
            "ix_known_answers_key", "profile", "profile_sha256", "argv_sha256", "engine_version", unique=True
        ),
    )

    id: int | None = Field(default=None, primary_key=True)
    profile: str
    profile_sha256: str
    argv_sha256: str  # of the JSON argv the unit executed
    engine_version: str = ""  # the engine's version as installed ("": not known): an upgrade answers anew
    run_id: int
    recorded_at: datetime = Field(default_factory=utcnow)
    answers: str  # JSON [{kind, prompt, text, tokens}]


class Captured(SQLModel, table=True):
    """A production request mirrored by the balancer and sampled (capture): what a replay needs, no header
    and no key. `body`: JSON {"prompt" | "messages", "params": sampling parameters}."""

    __tablename__ = "captured"

    id: int | None = Field(default=None, primary_key=True)
    at: float = Field(index=True)  # arrival, Unix seconds
    endpoint: str  # completions | chat
    model: str | None = None
    category: str | None = None
    size: int  # bytes of `body` (before it: the caps read sizes without reading bodies)
    body: str


class Dataset(SQLModel, table=True):
    """A named prompt set for benchmarks: a captured window, or an imported file."""

    __tablename__ = "datasets"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    source: str  # capture | openai | sharegpt
    created_at: datetime = Field(default_factory=utcnow)
    prompts: int
    categories: str  # JSON {category: prompts}
    sha256: str  # of the prompts, their parameters and lengths: a benchmark's prompt hash covers it
    # How output lengths are known: per prompt (imported), the engine's mean over the captured window, or
    # none (the requests' own max_tokens).
    lengths: str
    output_mean: float | None = None
    window_start: float | None = None  # captured: the first and last arrival (Unix seconds)
    window_end: float | None = None


class DatasetPrompt(SQLModel, table=True):
    __tablename__ = "dataset_prompts"
    __table_args__ = (Index("ix_dataset_prompts_order", "dataset_id", "idx", unique=True),)

    id: int | None = Field(default=None, primary_key=True)
    dataset_id: int = Field(foreign_key="datasets.id", ondelete="CASCADE")
    idx: int
    offset_s: float | None = None  # arrival after the dataset's first (captured); None: unknown
    endpoint: str  # completions | chat
    category: str | None = None
    body: str  # JSON {"prompt" | "messages", "params"}
    output_tokens: int | None = None  # the length to generate, where the source says


class GpuEvent(SQLModel, table=True):
    """An event the GPU driver reported (an Xid, an ECC event) or k25-ctl saw (a lost GPU, a holder stuck
    in D state), deduplicated across NVML and the kernel log."""

    __tablename__ = "gpu_events"

    id: int | None = Field(default=None, primary_key=True)
    at: float = Field(index=True)  # Unix seconds
    gpu: int | None = Field(default=None, index=True)
    bus_id: str | None = None
    source: str  # nvml | kernel | nvml+kernel | k25-ctl
    kind: str  # xid | ecc_double | ecc_single | lost | d_state
    code: int = 0  # the Xid
    pid: int | None = None
    message: str = ""


class GpuMark(SQLModel, table=True):
    """A reason an event left on a GPU's health (degraded, needs_reset), kept until a verified reset or an
    operator's acknowledgement (the run that cleared it)."""

    __tablename__ = "gpu_marks"

    id: int | None = Field(default=None, primary_key=True)
    gpu: int = Field(index=True)
    state: str  # degraded | needs_reset
    reason: str
    at: float
    xid: int | None = None
    cleared_at: float | None = None
    cleared_by_run: int | None = None
