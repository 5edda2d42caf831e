"""What an experiment (or a sweep's plan) is asked with. The rules a request must follow are in its JSON
schema as well as in its validation, so that a client generated from /openapi.json (and schemathesis's
schema-valid requests) never sends one that the daemon then rejects: profiles once each, a benchmark that
names no profile (the experiment's profiles are measured), and a sweep (a non-empty `vary`) of one base
profile that always restores."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from daemon.experiments.sweep.ranking import METRIC_PATTERN
from daemon.experiments.sweep.variants import Scalar
from daemon.measure.spec import BenchmarkSpec

# One axis of a sweep: its values, each once.
Axis = Annotated[list[Scalar], Field(min_length=1, json_schema_extra={"uniqueItems": True})]
# JSON Schema of "a non-empty vary makes it a sweep: one base profile, restored at the end".
SWEEP_RULE: JsonDict = {
    "if": {"required": ["vary"], "properties": {"vary": {"minProperties": 1}}},
    "then": {
        "properties": {"profiles": {"maxItems": 1}, "restore": {"const": True}, "rounds": {"maximum": 1}}
    },
}

# And of "an early stop is for an A/B experiment in rounds".
DECIDED_RULE: JsonDict = {
    "if": {"required": ["until_decided"], "properties": {"until_decided": {"const": True}}},
    "then": {
        "required": ["rounds"],
        "properties": {"profiles": {"minItems": 2, "maxItems": 2}, "rounds": {"minimum": 3}},
    },
}


class ExperimentBenchmark(BenchmarkSpec):
    """An experiment's benchmark: the experiment's profiles are measured, so it names none."""

    profile: None = Field(None, description="none: the experiment's profiles are measured in turn")


class ExperimentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [SWEEP_RULE, DECIDED_RULE]})

    profiles: list[str] = Field(
        min_length=1,
        max_length=32,
        json_schema_extra={"uniqueItems": True},
        description="measured in this order",
    )
    benchmark: ExperimentBenchmark = Field(default_factory=lambda: ExperimentBenchmark.model_validate({}))
    repeats: int = Field(1, ge=1, le=50, description="benchmarks per profile (their spread is the noise)")
    rounds: int = Field(
        1,
        ge=1,
        le=20,
        description="interleaved rounds: each round measures every profile, in balanced orders (two "
        "profiles: ABBA; more: a random order a round), so that a drift of the host falls on each alike",
    )
    until_decided: bool = Field(
        False,
        description="two profiles in rounds: stop after the round where every level's throughput is decided "
        "(a group-sequential test that keeps its error under repeated looks; `rounds` is the most)",
    )
    restore: bool = Field(True, description="bring the previous (or default) profile back at the end")
    vary: dict[str, Axis] = Field(
        default_factory=dict,
        description="a sweep: profile key or engine flag -> values (each once); the one profile named is the "
        "base, and each combination of values is a variant of it",
    )
    metric: str | None = Field(
        None,
        pattern=METRIC_PATTERN,
        description="what ranks a sweep: throughput (default), tpot_p50, ttft_p99, NAME@CONCURRENCY",
    )

    @model_validator(mode="after")
    def _rules(self) -> ExperimentRequest:
        if len(set(self.profiles)) != len(self.profiles):
            raise ValueError("a profile is listed twice: use repeats")
        for key, values in self.vary.items():
            if len({repr(v) for v in values}) != len(values):
                raise ValueError(f"axis {key!r} lists a value twice")
        if self.vary and len(self.profiles) != 1:
            raise ValueError("a sweep varies one profile: name only its base (measured first, as is)")
        if self.vary and self.rounds > 1:
            raise ValueError("a sweep measures its variants once each: use repeats, not rounds")
        if self.until_decided and (len(self.profiles) != 2 or self.rounds < 3):
            raise ValueError(
                "until_decided stops an A/B experiment in rounds early: two profiles, rounds >= 3"
            )
        if self.vary and not self.restore:
            raise ValueError("a sweep always restores: its variants are profiles only while it runs")
        return self


class PlanRequest(ExperimentRequest):
    """A sweep's plan: what to vary is what there is to plan."""

    vary: dict[str, Axis] = Field(
        min_length=1, description="profile key or engine flag -> values: each combination is a variant"
    )
