"""A sweep's result, pure: per variant its repeats' mean of the experiment's metric, the ratio to the base
with the noise band (the comparison's rules), the best variant, and the acceptance length predicted for
each number of drafted tokens from the base's per-position rates, beside the one measured."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from daemon.core.errors import InvalidInput
from daemon.core.jsontypes import StoredJson, VllmSummary
from daemon.experiments.compare import Measured, cv, mean, per_position, predicted_fewer
from daemon.experiments.metric_judge import judge, noise_band
from daemon.experiments.per_request import Samples, by_round
from daemon.experiments.sweep.variants import value_text
from daemon.experiments.verdict_types import Verdict

# The per-request figure each metric is judged on (experiments/per_request.py): its statistical verdict.
FAMILY = {"throughput": "throughput", "tpot": "tpot", "ttft": "ttft", "itl": "itl"}
# name -> (summary key, higher is better, what it reads as)
METRICS = {
    "throughput": ("output_throughput", True, "output throughput (tok/s)"),
    "tpot_p50": ("median_tpot_ms", False, "TPOT p50 (ms)"),
    "tpot_p99": ("p99_tpot_ms", False, "TPOT p99 (ms)"),
    "ttft_p50": ("median_ttft_ms", False, "TTFT p50 (ms)"),
    "ttft_p99": ("p99_ttft_ms", False, "TTFT p99 (ms)"),
    "itl_p50": ("median_itl_ms", False, "ITL p50 (ms)"),
}
AT_LEVEL = re.compile(r"^(\w+)@(\d+)$")  # throughput@8: at the level of concurrency 8
# The names the API's schema admits (the same check, declared: a client knows before it asks).
METRIC_PATTERN = rf"^({'|'.join(METRICS)})(@[1-9][0-9]{{0,5}})?$"


@dataclass(frozen=True)
class Metric:
    name: str
    key: str
    higher_better: bool
    label: str
    concurrency: int | None  # the level's; None: the first level

    def of(self, levels: Sequence[VllmSummary]) -> float | None:
        level = next(
            (s for s in levels if self.concurrency is None or s.get("max_concurrency") == self.concurrency),
            None,
        )
        value = level.get(self.key) if level else None
        return float(value) if isinstance(value, int | float) else None


def parse_metric(name: str | None) -> Metric:
    name = name or "throughput"
    m = AT_LEVEL.match(name)
    base, level = (m.group(1), int(m.group(2))) if m else (name, None)
    if base not in METRICS:
        known = ", ".join([*METRICS, "NAME@CONCURRENCY (e.g. throughput@8)"])
        raise InvalidInput(f"unknown metric {name!r} (known: {known})")
    key, higher, label = METRICS[base]
    where = f" at concurrency {level}" if level is not None else " at the first level"
    return Metric(name, key, higher, label + where, level)


@dataclass
class SweepRow:
    profile: str
    values: dict[str, object]  # axis label -> value ({} for the base)
    run_ids: list[int]
    value: float | None  # the metric's mean over the repeats
    cv: float | None
    samples: list[float]
    acceptance_length: float | None
    drafted: int | None  # tokens drafted per step (the per-position rates' count)
    predicted_length: float | None = None  # from the base's per-position rates
    ratio: float | None = None  # value / base's (for a lower-is-better metric: base's / value)
    noise: float | None = None
    noise_assumed: bool = False
    verdict: Verdict | None = None
    verdict_text: str | None = None  # judged from the requests: "faster: 1.07x [1.04, 1.10]"
    best: bool = False


@dataclass
class SweepResult:
    experiment_run_id: int
    base: str
    metric: str
    axes: list[str]
    rows: list[SweepRow] = field(default_factory=list)
    best: str | None = None
    recommendation: str | None = None
    promote: str | None = None  # the command that writes the best variant as a profile
    predicted: dict[int, float] = field(default_factory=dict)  # the base's, for fewer drafted tokens
    notes: list[str] = field(default_factory=list)


def _row(profile: str, values: dict[str, object], runs: list[Measured], metric: Metric) -> SweepRow:
    samples = [v for m in runs if (v := metric.of(m.levels)) is not None]
    first = [m.levels[0] for m in runs if m.levels]
    lengths = [float(x) for s in first if isinstance(x := s.get("acceptance_length"), int | float)]
    drafted = next((len(p) for s in first if (p := per_position(s))), None)
    return SweepRow(
        profile, values, [m.run_id for m in runs], mean(samples), cv(samples), samples, mean(lengths), drafted
    )


def per_position_of(runs: Sequence[Measured]) -> list[float]:
    """The mean per-position rates over the runs' first levels (those that report them)."""
    found = [p for m in runs if m.levels and (p := per_position(m.levels[0]))]
    if not found:
        return []
    k = min(len(p) for p in found)
    return [sum(float(p[i]) for p in found) / len(found) for i in range(k)]


def sweep_result(
    run_id: int,
    request: StoredJson,
    measured: Sequence[Measured],
    metric: Metric,
    *,
    samples: Mapping[int, Samples] | None = None,
    command: str = "k25-ctl",
) -> SweepResult:
    """`request`: the experiment's stored request (its profiles, and a sweep's `variants`); `samples`: each
    benchmark run's per-request figures (then a variant's verdict is judged from them)."""
    profiles = [str(p) for p in request.get("profiles") or []]
    variants = request.get("variants") or []
    base = profiles[0] if profiles else ""
    axes = [str(a["label"]) for a in request.get("axes") or []]
    out = SweepResult(run_id, base, metric.label, axes)
    order: list[tuple[str, dict[str, object]]] = [(p, {}) for p in profiles]
    order += [(str(v["name"]), dict(v["values"])) for v in variants]
    for name, values in order:
        out.rows.append(_row(name, values, [m for m in measured if m.profile == name], metric))
    base_row = out.rows[0] if out.rows else None
    per_pos = per_position_of([m for m in measured if m.profile == base])
    out.predicted = predicted_fewer(per_pos)
    bases = {str(a["label"]): a.get("base") for a in request.get("axes") or []}
    for row in out.rows:
        # A prediction holds for a variant that drafts fewer tokens and differs from the base in nothing else.
        changed = [k for k, v in row.values.items() if value_text(v) != bases.get(k)]
        if row.drafted is not None and len(changed) == 1:
            row.predicted_length = out.predicted.get(row.drafted)
        if base_row is None or base_row.value is None or row.value is None or not row.value:
            continue
        ratio = row.value / base_row.value if metric.higher_better else base_row.value / row.value
        row.ratio, row.noise, row.noise_assumed, row.verdict = noise_band(
            ratio, row.cv, base_row.cv, is_base=row is base_row
        )
        if samples is not None and row is not base_row:
            _judge_requests(row, base_row, samples, metric)
    _recommend(out, base_row, metric, f"{command} promote {run_id}")
    return out


def _recommend(out: SweepResult, base_row: SweepRow | None, metric: Metric, promote: str) -> None:
    """The best variant marked, and what to do about it (`promote`: the command, less the variant)."""
    base = out.base
    ranked = [r for r in out.rows if r.value is not None]
    if not ranked or base_row is None:
        out.notes.append("nothing measured: no best variant")
        return
    sign = 1.0 if metric.higher_better else -1.0
    best = max(ranked, key=lambda r: sign * (r.value or 0.0))
    best.best = True
    out.best = best.profile
    if best is base_row:
        out.recommendation = f"keep {base}: no variant beat it on {metric.label}"
    elif best.verdict_text is not None:
        out.recommendation = f"{best.profile} against {base} on {metric.label}: {best.verdict_text}"
        out.promote = f"{promote} '{best.profile}'"
    elif best.ratio is not None and best.noise is not None:
        sure = "outside the noise" if best.verdict is Verdict.FASTER else "within the noise: not a sure gain"
        assumed = " (noise assumed: use repeats)" if best.noise_assumed else ""
        out.recommendation = (
            f"{best.profile}: {best.ratio:.2f}x {base} on {metric.label}, "
            f"noise band ±{best.noise:.0%}{assumed}, {sure}"
        )
        out.promote = f"{promote} '{best.profile}'"
    if any(r.value is None for r in out.rows):
        out.notes.append("unmeasured: " + ", ".join(r.profile for r in out.rows if r.value is None))


def _judge_requests(row: SweepRow, base: SweepRow, samples: Mapping[int, Samples], metric: Metric) -> None:
    """The variant's verdict from its requests against the base's (the metric's per-request figure)."""
    family = FAMILY[metric.name.split("@")[0].split("_")[0]]
    mine, theirs = by_round([row.run_ids], samples), by_round([base.run_ids], samples)  # repeats: one round
    if (j := judge(family, theirs, mine, lower_is_better=not metric.higher_better)) is not None:
        row.verdict, row.verdict_text = j.verdict, j.text()
