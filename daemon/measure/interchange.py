"""Benchmarks measured elsewhere (to compare against `vllm bench serve`'s own runs): `vllm bench serve
--save-result` files (one JSON object per load level; k25-ctl's own export writes the same keys) imported as a
benchmark run, labelled as imported, so that another tool's figures sit beside k25-ctl's. Pure: the file read
and checked, and what is stored of it; the runner stores it (measure/runner.py)."""

from __future__ import annotations

import json
import math

from pydantic import BaseModel, ConfigDict, Field

from daemon.core.jsontypes import StoredJson, VllmSummary
from daemon.measure.spec import BenchmarkSpec
from daemon.store.bench import LevelRow
from daemon.store.models import Benchmark

TOOL = "vllm bench serve"


class VllmResult(BaseModel):
    """One load level as `vllm bench serve --save-result` writes it: the figures every comparison reads
    are required; the rest (percentiles, per-request lists) is kept as it came."""

    model_config = ConfigDict(extra="allow")
    duration: float = Field(gt=0)
    completed: int = Field(ge=0)
    total_input_tokens: int = Field(ge=0)
    total_output_tokens: int = Field(ge=0)
    request_throughput: float = Field(ge=0)
    output_throughput: float = Field(ge=0)
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    max_concurrency: int | None = Field(None, ge=1)
    request_rate: float | str = "inf"  # vLLM writes Infinity, k25-ctl's export "inf"
    num_prompts: int | None = Field(None, ge=1)
    model_id: str | None = None

    def rate(self) -> float | None:
        """The level's request rate; None: all at once (inf)."""
        r = self.request_rate
        value = float(r) if not isinstance(r, str) or r.lower() not in ("inf", "infinity") else math.inf
        return None if math.isinf(value) else value


class ImportIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    profile: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="the name it is listed under")
    label: str = Field("", max_length=200, description="where the figures came from (a host, a tool run)")
    results: list[VllmResult] | VllmResult = Field(description="the file: one level, or a list of levels")

    def levels(self) -> list[VllmResult]:
        return self.results if isinstance(self.results, list) else [self.results]


def spec_of(levels: list[VllmResult]) -> BenchmarkSpec:
    """The load levels as k25-ctl would have asked for them (concurrency, or Poisson rates)."""
    rates = [lv.rate() for lv in levels]
    num = levels[0].num_prompts or max(1, levels[0].completed)
    if all(r is not None for r in rates):
        load: StoredJson = {"request_rate": rates, "max_concurrency": levels[0].max_concurrency}
    else:
        load = {"concurrency": [lv.max_concurrency or lv.num_prompts or 1 for lv in levels]}
    return BenchmarkSpec.model_validate(load | {"num_prompts": num})


def stored(run_id: int, req: ImportIn) -> tuple[Benchmark, list[LevelRow]]:
    """The benchmark row and its levels: the figures as they came, the provenance saying whence."""
    levels = req.levels()
    spec = spec_of(levels)
    provenance: StoredJson = {
        "imported": {"tool": TOOL, "label": req.label},
        "profile": req.profile,
        "model": levels[0].model_id,
        "spec_hash": spec.digest(),
    }
    rows = [LevelRow(lv.max_concurrency, lv.rate(), _summary(lv), []) for lv in levels]
    first = rows[0].summary
    bench = Benchmark(
        run_id=run_id,
        profile=req.profile,
        spec=spec.model_dump_json(),
        spec_hash=spec.digest(),
        prompt_hash="",
        provenance=json.dumps(provenance),
        gpu_key="",
        output_throughput=first.get("output_throughput"),
        acceptance_length=first.get("spec_decode_acceptance_length"),
        acceptance_rate=None,
        other_traffic=False,
    )
    return bench, rows


def _summary(lv: VllmResult) -> VllmSummary:
    out: VllmSummary = lv.model_dump(mode="json")
    out["request_rate"] = lv.rate() or "inf"
    out.setdefault("failed", (lv.num_prompts or lv.completed) - lv.completed)
    return out
