"""What a benchmark measures: load levels, prompts, request shape. The spec's hash (without the profile) is
what `compare` matches on, with the prompt set's hash and the GPUs."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from daemon.measure.capacity import CapacitySearch

BUILT_IN = ("builtin", "random", "custom")
Level = Annotated[int, Field(ge=1, le=4096)]
Rate = Annotated[float, Field(gt=0, le=100_000)]
PromptText = Annotated[str, Field(min_length=1, max_length=100_000)]


# JSON Schema of the rule _consistent enforces: prompts with the custom dataset, and only with it.
CUSTOM_RULE: JsonDict = {
    "if": {"required": ["dataset"], "properties": {"dataset": {"const": "custom"}}},
    "then": {"required": ["prompts"], "properties": {"prompts": {"type": "array", "minItems": 1}}},
    "else": {"properties": {"prompts": {"type": "null"}}},
}


# And of the pace rule: a paced replay names a stored dataset, and sets no request rate.
PACE_RULE: JsonDict = {
    "if": {"required": ["pace"], "properties": {"pace": {"type": "number"}}},
    "then": {
        "required": ["dataset"],
        "properties": {
            "dataset": {"not": {"enum": list(BUILT_IN)}},
            "request_rate": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]},
        },
    },
}


# And of the capacity rule: a search needs an SLO and chooses its own rates.
CAPACITY_RULE: JsonDict = {
    "if": {"required": ["capacity"], "properties": {"capacity": {"type": "object"}}},
    "then": {
        "required": ["slo"],
        "properties": {
            "slo": {"type": "string"},
            "pace": {"type": "null"},
            "request_rate": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}]},
        },
    },
}


class Gate(BaseModel):
    """A benchmark that gates a rollout: the share of this host's own normal it must reach."""

    model_config = ConfigDict(extra="forbid")

    min_relative: float = Field(gt=0, le=10, description="throughput over the host's normal, at least")
    require_normal: bool = Field(
        default=False,
        description="fail when there is no normal to compare with (the first benchmark of its kind); "
        "otherwise such a gate passes, saying so",
    )


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"allOf": [CUSTOM_RULE, PACE_RULE, CAPACITY_RULE]}
    )

    profile: str | None = Field(None, description="the profile to measure (default and only: the active one)")
    concurrency: list[Level] = Field(
        default_factory=lambda: [1], min_length=1, max_length=16, description="fixed concurrency levels"
    )
    request_rate: list[Rate] | None = Field(
        None, max_length=16, description="Poisson request rates (req/s) instead of concurrency levels"
    )
    max_concurrency: Level | None = Field(None, description="cap on requests in flight at a request rate")
    num_prompts: int = Field(16, ge=1, le=100_000, description="measured requests per level")
    max_tokens: int = Field(
        128, ge=1, le=131_072, description="output tokens per request (a dataset: the most per request)"
    )
    warmups: int = Field(1, ge=0, le=1000, description="requests before each level, not counted")
    temperature: float = Field(0.0, ge=0, le=2)
    endpoint: Literal["completions", "chat"] = "completions"
    dataset: str = Field(
        "builtin",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$",
        description="builtin, random, custom (with prompts), or a stored dataset's name (k25-ctl datasets): "
        "its own prompts, sampling parameters, categories and output lengths",
    )
    pace: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="a captured dataset at its own arrival times, this many times faster (1: as captured); "
        "in place of the load levels",
    )
    input_len: int = Field(128, ge=1, le=131_072, description="random: prompt length (words ~ tokens)")
    ignore_eos: bool | None = Field(None, description="default: on for the random dataset")
    prompts: list[PromptText] | None = Field(None, max_length=20_000, description="custom: the prompts")
    salt: bool = Field(True, description="a fresh random prefix per run and request: no prefix-cache hits")
    seed: int = Field(0, ge=0, description="random prompts and Poisson arrivals")
    request_timeout_s: float = Field(600.0, gt=0, le=86_400)
    slo: str | None = Field(
        None,
        max_length=500,
        pattern=r"^[A-Za-z0-9_.,=%-]+$",
        description="a latency SLO, inline (ttft_p95_ms=800,tpot_p95_ms=60,errors=0.5%) or named in the "
        "settings' [slos]: each level then says whether it met it, and its goodput",
    )

    gate: Gate | None = Field(
        default=None,
        description="judge this benchmark against the host's own normal (GET /benchmarks/{id}'s gate): a "
        "rollout's gate; like the SLO, not part of the spec hash",
    )
    acceptance_by_category: bool = Field(
        default=False,
        description="a speculative profile: after each level, its acceptance per prompt category with a 95% "
        "interval (per request where the engine reports verify steps, else in windows of one category)",
    )
    capacity: CapacitySearch | None = Field(
        None,
        description="a capacity search in place of the load levels: the highest Poisson request rate that "
        "meets the SLO (which it needs), bracketed then bisected",
    )

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSpec:
        if self.dataset == "custom" and not self.prompts:
            raise ValueError("dataset 'custom' needs prompts (a list of strings)")
        if self.dataset != "custom" and self.prompts:
            raise ValueError(f"prompts are given but dataset is {self.dataset!r}: use dataset 'custom'")
        if self.pace is not None and not self.stored:
            raise ValueError("pace replays a captured dataset's arrivals: name the dataset")
        if self.pace is not None and self.request_rate:
            raise ValueError("pace and request_rate both set the arrivals: give one")
        if self.capacity is not None:
            if self.slo is None:
                raise ValueError("a capacity search needs an SLO (slo): the rate it finds is the SLO's")
            if self.request_rate or self.pace is not None:
                raise ValueError(
                    "a capacity search chooses its own request rates: drop request_rate and pace"
                )
        return self

    @property
    def stored(self) -> bool:
        """A stored dataset (not one of the built-in sources) is replayed."""
        return self.dataset not in BUILT_IN

    @property
    def eos_ignored(self) -> bool:
        """On by default where the lengths are chosen: random prompts, and a dataset's replay."""
        return self.ignore_eos if self.ignore_eos is not None else self.dataset == "random" or self.stored

    def levels(self) -> list[tuple[int | None, float | None]]:
        """(concurrency, request rate) per level: concurrency levels, or rates capped by max_concurrency; a
        paced replay is one level (its arrivals capped by max_concurrency)."""
        if self.pace is not None:
            return [(self.max_concurrency, None)]
        if self.capacity is not None:  # the search's first step; the others follow from what it shows
            return [(self.max_concurrency, self.capacity.start_rate)]
        if self.request_rate:
            return [(self.max_concurrency, r) for r in self.request_rate]
        return [(c, None) for c in self.concurrency]

    def digest(self) -> str:
        """What makes two benchmarks comparable: everything but the profile."""
        data = self.model_dump(exclude={"profile", "slo", "gate"})  # they judge a measurement, change none
        if not data.get("acceptance_by_category"):  # hashes of benchmarks from before it stay as they were
            data.pop("acceptance_by_category", None)
        if data.get("capacity") is None:
            data.pop("capacity", None)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
