"""Latency SLOs and goodput (which profile serves more within a latency SLO), pure. An SLO names bounds in
milliseconds on TTFT, TPOT and E2E latency at a percentile (`ttft_p95_ms=800`), and a bound on the share of
failed requests (`errors=0.5%`). A level meets the SLO when each named percentile is within its bound and the
failed share too.

Goodput is `vllm bench serve --goodput`'s: the requests per second that met every per-request bound (a
request's TTFT, its TPOT = (E2E - TTFT) / (output tokens - 1), 0 for one token, and its E2E), over the
level's duration (vllm/benchmarks/serve.py, `calculate_metrics`). A failed request is never good."""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.core.errors import InvalidInput
from daemon.core.jsontypes import VllmSummary
from daemon.measure.metrics import PERCENTILES, RequestRecord

METRICS = ("ttft", "tpot", "e2el")
BOUND = re.compile(r"^(?P<metric>ttft|tpot|e2el)_(?P<stat>p\d+|median|mean)_ms$")
STATS = {"median", "mean", *(f"p{p}" for p in PERCENTILES)}


@dataclass(frozen=True)
class Bound:
    metric: str  # ttft | tpot | e2el
    stat: str  # p90, p95, p99, median or mean: the level's figure that must stay within
    ms: float

    @property
    def key(self) -> str:
        """The summary's key of this figure (`p95_ttft_ms`, vllm bench serve's names)."""
        return f"{self.stat}_{self.metric}_ms"


@dataclass(frozen=True)
class Slo:
    bounds: tuple[Bound, ...]
    max_error_share: float | None = None  # failed / sent, e.g. 0.005

    def text(self) -> str:
        parts = [f"{b.metric}_{b.stat}_ms={b.ms:g}" for b in self.bounds]
        if self.max_error_share is not None:
            parts.append(f"errors={self.max_error_share * 100:g}%")
        return ",".join(parts)


def parse(text: str) -> Slo:
    """`ttft_p95_ms=800,tpot_p95_ms=60,errors=0.5%`; InvalidInput naming the part it cannot read."""
    bounds: dict[str, Bound] = {}
    errors: float | None = None
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        if not sep or not value.strip():
            raise InvalidInput(f"SLO part {part!r}: expected name=value (ttft_p95_ms=800, errors=0.5%)")
        key, value = key.strip(), value.strip()
        if key == "errors":
            errors = _share(part, value)
            continue
        m = BOUND.match(key)
        if m is None or m["stat"] not in STATS:
            raise InvalidInput(
                f"SLO part {part!r}: no such bound (ttft, tpot or e2el, then _p90, _p95, _p99, _median or "
                f"_mean, then _ms: ttft_p95_ms)"
            )
        if m["metric"] in bounds:
            raise InvalidInput(f"SLO part {part!r}: {m['metric']} is bounded twice")
        bounds[m["metric"]] = Bound(m["metric"], m["stat"], _positive(part, value))
    if not bounds and errors is None:
        raise InvalidInput("the SLO names no bound")
    return Slo(tuple(bounds[k] for k in METRICS if k in bounds), errors)


def _positive(part: str, value: str) -> float:
    try:
        ms = float(value)
    except ValueError:
        raise InvalidInput(f"SLO part {part!r}: {value!r} is not a number of milliseconds") from None
    if not ms > 0:
        raise InvalidInput(f"SLO part {part!r}: the bound must be above 0 ms")
    return ms


def _share(part: str, value: str) -> float:
    pct = value.endswith("%")
    try:
        share = float(value.rstrip("%")) / (100.0 if pct else 1.0)
    except ValueError:
        raise InvalidInput(f"SLO part {part!r}: {value!r} is not a share (0.5% or 0.005)") from None
    if not 0 <= share <= 1:
        raise InvalidInput(f"SLO part {part!r}: a share between 0 and 100%")
    return share


def good(r: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every per-request bound of the SLO."""
    if not r.ok or r.ttft is None or r.e2el is None:
        return False
    seconds = {"ttft": r.ttft, "tpot": r.tpot or 0.0, "e2el": r.e2el}  # one token: TPOT 0, as vLLM
    return all(seconds[b.metric] * 1000.0 <= b.ms for b in slo.bounds)


def judge(records: list[RequestRecord], summary: VllmSummary, slo: Slo) -> VllmSummary:
    """What the summary gains under an SLO: goodput, the good requests, whether the level met the SLO and,
    where not, each bound it missed."""
    duration = float(summary.get("duration") or 0.0)
    n_good = sum(1 for r in records if good(r, slo))
    missed = []
    for b in slo.bounds:
        figure = summary.get(b.key)
        if figure is None or float(figure) > b.ms:
            missed.append(f"{b.key} {'none' if figure is None else f'{float(figure):.1f}'} > {b.ms:g}")
    share = (len(records) - sum(1 for r in records if r.ok)) / len(records) if records else 0.0
    if slo.max_error_share is not None and share > slo.max_error_share:
        missed.append(f"errors {share:.2%} > {slo.max_error_share:.2%}")
    return {
        "slo": slo.text(),
        "good_requests": n_good,
        "request_goodput": n_good / duration if duration > 0 else 0.0,
        "slo_met": not missed,
        "slo_missed": missed,
    }
