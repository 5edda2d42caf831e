"""Scrapes of a serving engine folded into one row per period (a minute): the counters' deltas (requests,
tokens, spec-decode acceptance through the engine's own delta rules), tokens/s, the last gauges. A counter
that goes backwards means the engine restarted: the new counts start from zero, never a negative rate."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from daemon.core.profiles import Profile
from daemon.engines.base import Engine
from daemon.engines.engine_types import MetricsSnapshot, UsageDelta
from daemon.store.models import ServingMetric
from daemon.store.serving import weighted

ZERO = MetricsSnapshot(
    prompt_tokens=0.0,
    generation_tokens=0.0,
    requests=0.0,
    spec_drafts=0.0,
    spec_draft_tokens=0.0,
    spec_accepted=0.0,
)


def went_back(before: MetricsSnapshot, after: MetricsSnapshot) -> bool:
    pairs = (
        (before.generation_tokens, after.generation_tokens),
        (before.prompt_tokens, after.prompt_tokens),
        (before.requests, after.requests),
    )
    return any(b is not None and a is not None and a < b for b, a in pairs)


@dataclass
class _Segment:
    """Scrapes between two engine restarts: deltas are last - first."""

    first: MetricsSnapshot
    last: MetricsSnapshot


@dataclass
class MetricsWindow:
    run_id: int
    profile: Profile
    engine: Engine
    period_s: float
    started_wall: datetime | None = None
    started_mono: float = 0.0
    last_mono: float = 0.0
    segments: list[_Segment] = field(default_factory=list)

    def add(self, snap: MetricsSnapshot, mono: float, wall: datetime) -> ServingMetric | None:
        """Fold one scrape in; returns the finished row when the period is over (the scrape then starts
        the next period)."""
        if not self.segments:
            self.started_wall = wall
            self.started_mono = mono
            self.last_mono = mono
            self.segments = [_Segment(snap, snap)]
            return None
        if went_back(self.segments[-1].last, snap):
            self.segments.append(_Segment(ZERO, snap))
        else:
            self.segments[-1].last = snap
        self.last_mono = mono
        if mono - self.started_mono < self.period_s:
            return None
        row = self.row()
        self.started_wall = wall
        self.started_mono = mono
        self.segments = [_Segment(snap, snap)]
        return row

    def row(self) -> ServingMetric | None:
        """The period so far as a row (None before two scrapes)."""
        seconds = self.last_mono - self.started_mono
        if self.started_wall is None or seconds <= 0:
            return None
        usages = [(s, self.engine.usage_delta(self.profile, s.first, s.last)) for s in self.segments]
        gen = sum(u.generation_tokens for _, u in usages)
        last = self.segments[-1].last
        return ServingMetric(
            run_id=self.run_id,
            at=self.started_wall,
            seconds=seconds,
            requests=sum(max(0.0, (s.last.requests or 0.0) - (s.first.requests or 0.0)) for s, _ in usages),
            prompt_tokens=sum(u.prompt_tokens for _, u in usages),
            generation_tokens=gen,
            tokens_per_s=gen / seconds,
            running=last.running,
            waiting=last.waiting,
            kv_usage=last.kv_usage,
            acceptance_rate=_by_tokens([(u.acceptance_rate, u) for _, u in usages]),
            acceptance_length=_by_tokens([(u.acceptance_length, u) for _, u in usages]),
            per_position=_per_position([u for _, u in usages]),
        )


def _by_tokens(values: list[tuple[float | None, UsageDelta]]) -> float | None:
    return weighted([(v, u.generation_tokens) for v, u in values])


def _per_position(usages: list[UsageDelta]) -> str | None:
    lists = [
        (u.per_position, u.generation_tokens) for u in usages if u.per_position and u.generation_tokens > 0
    ]
    if not lists:
        return None
    width = max(len(p) for p, _ in lists)
    total = sum(w for _, w in lists)
    return json.dumps(
        [sum((p[i] if i < len(p) else 0.0) * w for p, w in lists) / total for i in range(width)]
    )
