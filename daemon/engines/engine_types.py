"""The types engines speak in: readiness, log events, metric snapshots and deltas, park calls, load
stages."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from daemon.core.jsontypes import RequestBody


class Readiness(enum.StrEnum):
    LOADING = "loading"  # HTTP not served yet: weights still loading
    WARMING = "warming"  # HTTP up but the engine says it cannot serve yet
    HEALTHY = "healthy"  # health rule passes; a real generation must still prove it
    DEAD = "dead"  # the engine reports itself dead


class LogKind(enum.StrEnum):
    PROGRESS = "progress"
    READY = "ready"
    ERROR = "error"
    MILESTONE = "milestone"


@dataclass(frozen=True)
class LogEvent:
    kind: LogKind
    line: str
    percent: int | None = None
    done: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class MetricsSnapshot:
    """The engine counters k25-ctl uses, summed over label sets (engines, TP ranks)."""

    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    spec_drafts: float | None = None
    spec_draft_tokens: float | None = None
    spec_accepted: float | None = None
    spec_accepted_per_pos: dict[int, float] = field(default_factory=dict)
    # SGLang: interval gauges, and the lifetime mean from /server_info.
    spec_accept_length_gauge: float | None = None
    spec_accept_rate_gauge: float | None = None
    server_accept_length: float | None = None
    # Gauges of the moment: requests running and waiting, KV cache usage (0..1).
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None


@dataclass(frozen=True)
class UsageDelta:
    """What happened between two scrapes. Acceptance length includes the bonus token (1..k+1);
    `acceptance_rate` is the engine's native rate, `normalized_rate` the vLLM definition
    (accepted / proposed draft tokens), comparable across engines."""

    prompt_tokens: float
    generation_tokens: float
    acceptance_length: float | None = None
    acceptance_rate: float | None = None
    normalized_rate: float | None = None
    per_position: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ParkStep:
    """One POST of a wake, with its JSON body, the load stage its time counts in, and what its refusal
    means."""

    path: str
    body: RequestBody | None = None
    stage: str = "wake"
    note: str = ""


@dataclass(frozen=True)
class ParkCalls:
    """An engine's parking endpoints: POST `sleep` (frees GPU memory), the POSTs of the wake in order, and
    GET `sleeping` (JSON {"is_sleeping": bool}) where the engine can say so."""

    sleep: str
    wake: tuple[ParkStep, ...]
    sleeping: str | None = None
    # POSTed after a wake, before the known-answer check: KV blocks indexed before the sleep are gone
    # (vllm#17103), so no request may hit them.
    reset_prefix_cache: str | None = None


@dataclass(frozen=True)
class StageRule:
    """One load stage the engine reports in its log: a line with its duration (`secs` group), or the
    begin/end lines of a stage it does not time itself (the journal's timestamps time it)."""

    stage: str
    pattern: re.Pattern[str]
    mark: str = "took"  # took | begin | end
