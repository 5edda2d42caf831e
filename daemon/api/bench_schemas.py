"""Response models of the benchmark, experiment and comparison routes. A level's `summary` keeps
`vllm bench serve`'s key names (its acceptance rate in percent), beside k25-ctl's own (fractions)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from daemon.api.schemas import Out, SafeArgv, SafeOptionalText


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


# JSON boundary: objects keyed as `vllm bench serve --save-result` writes them (vLLM's names, not ours).
VllmResultJson = dict[str, Any]


class BenchmarkLevelOut(BaseModel):
    concurrency: int | None
    request_rate: float | None
    summary: dict[str, Any]
    requests: list[dict[str, Any]] | None = None  # with ?requests=true


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
    spec: dict[str, Any] | None = None  # None while it runs (stored at its end)
    spec_hash: str | None = None
    prompt_hash: str | None = None
    provenance: ProvenanceOut | None = None
    output_throughput: float | None = None  # the first level's
    acceptance_length: float | None = None
    acceptance_rate: float | None = None
    other_traffic: bool = False
    levels: list[BenchmarkLevelOut] = []


class ExperimentOut(BaseModel):
    run_id: int
    outcome: str
    phase: str
    started_at: datetime
    ended_at: datetime | None
    error: SafeOptionalText
    request: dict[str, Any]
    steps: list[dict[str, Any]]
    restore: dict[str, Any] | None = None


class CompareRowOut(BaseModel):
    profile: str
    run_ids: list[int]
    repeats: int
    output_throughput: float | None
    throughput_cv: float | None
    decode_tok_s: float | None
    acceptance_length: float | None
    acceptance_rate: float | None
    normalized_rate: float | None
    other_traffic: bool
    speedup: float | None
    noise: float | None
    noise_assumed: bool
    verdict: str | None  # baseline | faster | slower | within noise
    levels: list[dict[str, Any]]
    latency_ms: dict[str, dict[str, float | None]]
    provenance: ProvenanceOut


class CompareOut(BaseModel):
    baseline: str
    spec_hash: str | None
    prompt_hash: str | None
    gpu_key: str | None
    metric: str
    rows: list[CompareRowOut]
    notes: list[str]
