"""What a benchmark measures: load levels, prompts, request shape. The spec's hash (without the profile) is
what `compare` matches on, with the prompt set's hash and the GPUs."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

Level = Annotated[int, Field(ge=1, le=4096)]
Rate = Annotated[float, Field(gt=0, le=100_000)]
PromptText = Annotated[str, Field(min_length=1, max_length=100_000)]


# JSON Schema of the rule _consistent enforces: prompts with the custom dataset, and only with it.
CUSTOM_RULE: JsonDict = {
    "if": {"required": ["dataset"], "properties": {"dataset": {"const": "custom"}}},
    "then": {"required": ["prompts"], "properties": {"prompts": {"type": "array", "minItems": 1}}},
    "else": {"properties": {"prompts": {"type": "null"}}},
}


class BenchmarkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=CUSTOM_RULE)

    profile: str | None = Field(None, description="the profile to measure (default and only: the active one)")
    concurrency: list[Level] = Field(
        default_factory=lambda: [1], min_length=1, max_length=16, description="fixed concurrency levels"
    )
    request_rate: list[Rate] | None = Field(
        None, max_length=16, description="Poisson request rates (req/s) instead of concurrency levels"
    )
    max_concurrency: Level | None = Field(None, description="cap on requests in flight at a request rate")
    num_prompts: int = Field(16, ge=1, le=100_000, description="measured requests per level")
    max_tokens: int = Field(128, ge=1, le=131_072, description="output tokens per request")
    warmups: int = Field(1, ge=0, le=1000, description="requests before each level, not counted")
    temperature: float = Field(0.0, ge=0, le=2)
    endpoint: Literal["completions", "chat"] = "completions"
    dataset: Literal["builtin", "random", "custom"] = "builtin"
    input_len: int = Field(128, ge=1, le=131_072, description="random: prompt length (words ~ tokens)")
    ignore_eos: bool | None = Field(None, description="default: on for the random dataset")
    prompts: list[PromptText] | None = Field(None, max_length=20_000, description="custom: the prompts")
    salt: bool = Field(True, description="a fresh random prefix per run and request: no prefix-cache hits")
    seed: int = Field(0, ge=0, description="random prompts and Poisson arrivals")
    request_timeout_s: float = Field(600.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _consistent(self) -> BenchmarkSpec:
        if self.dataset == "custom" and not self.prompts:
            raise ValueError("dataset 'custom' needs prompts (a list of strings)")
        if self.dataset != "custom" and self.prompts:
            raise ValueError(f"prompts are given but dataset is {self.dataset!r}: use dataset 'custom'")
        return self

    @property
    def eos_ignored(self) -> bool:
        return self.ignore_eos if self.ignore_eos is not None else self.dataset == "random"

    def levels(self) -> list[tuple[int | None, float | None]]:
        """(concurrency, request rate) per level: concurrency levels, or rates capped by max_concurrency."""
        if self.request_rate:
            return [(self.max_concurrency, r) for r in self.request_rate]
        return [(c, None) for c in self.concurrency]

    def digest(self) -> str:
        """What makes two benchmarks comparable: everything but the profile."""
        data = self.model_dump(exclude={"profile"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]
