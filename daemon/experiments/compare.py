"""The comparison: per profile its latest benchmark of one spec (same prompts, same GPUs), its repeats'
spread as the noise, and the speedup over the baseline with a verdict. Pure: the caller reads the rows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from daemon.core.jsontypes import StoredJson, VllmSummary
from daemon.core.run_types import Outcome
from daemon.experiments.metric_judge import ASSUMED_NOISE, noise_band
from daemon.experiments.verdict_types import Judged, Verdict

if TYPE_CHECKING:
    from daemon.store.bench import BenchmarkView

# A category is judged on its own only with this many completed requests on each side.
MIN_CATEGORY_REQUESTS = 10
LATENCIES = ("ttft", "tpot", "itl", "itl_per_token", "e2el")
PROVENANCE = ("engine", "engine_version", "model", "drafter", "profile_sha256", "gpu_names", "driver")


@dataclass(frozen=True)
class Measured:
    """One finished benchmark, as compare needs it."""

    run_id: int
    profile: str
    spec_hash: str
    prompt_hash: str
    gpu_key: str
    experiment_run_id: int | None
    levels: list[VllmSummary]  # in level order
    provenance: StoredJson
    round: int | None = None  # the experiment's round


# What each level shows on the page's charts (and the CLI's Pareto table): its shape, throughputs,
# goodput under an SLO, and the p50 and p95 latencies.
LEVEL_KEYS = (
    "max_concurrency",
    "request_rate",
    "output_throughput",
    "request_throughput",
    "request_goodput",
    *(f"{stat}_{metric}_ms" for metric in ("ttft", "tpot", "e2el") for stat in ("median", "p95")),
)


@dataclass
class CategoryRow:
    """One prompt category of a profile's benchmark: its per-stream throughput (output tokens over its
    requests' own time), latencies, acceptance from the streams, and its own verdict."""

    requests: int
    stream_tok_s: float | None
    median_ttft_ms: float | None
    median_tpot_ms: float | None
    acceptance_length: float | None
    acceptance_rate: float | None
    speedup: float | None = None
    verdict: Verdict | None = None


@dataclass
class Row:
    """One profile in the comparison: its latest benchmark (with its repeats) and the verdict."""

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
    levels: list[VllmSummary]  # each level's shape and throughput
    provenance: StoredJson
    latency_ms: dict[str, dict[str, float | None]]
    # Had fewer tokens been drafted: k' -> the mean acceptance length (the newest run's per-position rates).
    predicted_length: dict[int, float] = field(default_factory=dict)
    speedup: float | None = None
    noise: float | None = None
    noise_assumed: bool = False
    # baseline | faster | slower | no difference detected (judged from the requests: `judged`) | within noise
    # (too few requests to judge: the repeats' noise band)
    verdict: Verdict | None = None
    verdict_text: str | None = None  # "faster: 1.07x [1.04, 1.10]"
    judged: dict[str, Judged] = field(default_factory=dict)  # per-request metric -> its test against the base
    judged_text: dict[str, str] = field(default_factory=dict)  # the same, as "faster: 1.07x [1.04, 1.10]"
    categories: dict[str, CategoryRow] = field(default_factory=dict)
    # run_ids by the experiment's round, in round order: the requests of one round share its conditions
    rounds: list[list[int]] = field(default_factory=list)

    # "1.31x on code, 0.74x on chat": the categories judged on their own.
    per_category: str | None = None


@dataclass
class Comparison:
    baseline: str
    spec_hash: str | None
    prompt_hash: str | None
    gpu_key: str | None
    metric: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def finished(views: Iterable[BenchmarkView]) -> list[Measured]:
    """The benchmarks among `views` that ended ok, as compare reads them (in the same order)."""
    return [
        Measured(
            v.bench.run_id,
            v.bench.profile,
            v.bench.spec_hash,
            v.bench.prompt_hash,
            v.bench.gpu_key,
            v.bench.experiment_run_id,
            v.summaries,
            v.provenance,
            v.bench.round,
        )
        for v in views
        if v.run.outcome == Outcome.OK
    ]


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def cv(xs: Sequence[float]) -> float | None:
    """Relative sample spread of repeats (None with fewer than two)."""
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return sd / m if m else None


def _group(latest: Measured, all_rows: list[Measured]) -> list[Measured]:
    """The latest benchmark and its repeats (the same experiment's benchmarks of that profile)."""
    if latest.experiment_run_id is None:
        return [latest]
    return [
        m
        for m in all_rows
        if m.experiment_run_id == latest.experiment_run_id
        and m.profile == latest.profile
        and m.spec_hash == latest.spec_hash
    ]


def _row(profile: str, group: list[Measured]) -> Row:
    first = [m.levels[0] for m in group if m.levels]
    thr = [float(s["output_throughput"]) for s in first]
    newest = group[0]
    s0 = newest.levels[0] if newest.levels else {}

    def avg(key: str) -> float | None:
        return mean([float(s[key]) for s in first if s.get(key) is not None])

    return Row(
        profile=profile,
        run_ids=[m.run_id for m in group],
        rounds=_by_round(group),
        repeats=len(group),
        output_throughput=mean(thr),
        throughput_cv=cv(thr),
        decode_tok_s=avg("mean_decode_tok_s"),
        acceptance_length=avg("acceptance_length"),
        acceptance_rate=avg("acceptance_rate"),
        normalized_rate=avg("normalized_rate"),
        other_traffic=any(s.get("other_traffic") for s in first),
        levels=[{k: s.get(k) for k in LEVEL_KEYS} for s in newest.levels],
        provenance={k: newest.provenance.get(k) for k in PROVENANCE},
        latency_ms={
            name: {stat: s0.get(f"{stat}_{name}_ms") for stat in ("mean", "median", "p99")}
            for name in LATENCIES
        },
        predicted_length=predicted_below(s0),
        categories=_categories(first),
    )


def _by_round(group: list[Measured]) -> list[list[int]]:
    """The group's run ids per round, in round order (benchmarks outside rounds: one round)."""
    rounds: dict[int, list[int]] = {}
    for m in group:
        rounds.setdefault(m.round or 0, []).append(m.run_id)
    return [rounds[r] for r in sorted(rounds)]


def _categories(first: list[VllmSummary]) -> dict[str, CategoryRow]:
    """Each category's figures, averaged over the repeats' first levels."""
    names = sorted({name for s in first for name in (s.get("categories") or {})})
    out = {}
    for name in names:
        cats = [c for s in first if (c := (s.get("categories") or {}).get(name))]

        def avg(key: str, cats: list[StoredJson] = cats) -> float | None:
            return mean([float(c[key]) for c in cats if c.get(key) is not None])

        out[name] = CategoryRow(
            requests=min(int(c.get("completed") or 0) for c in cats),
            stream_tok_s=avg("stream_tok_s"),
            median_ttft_ms=avg("median_ttft_ms"),
            median_tpot_ms=avg("median_tpot_ms"),
            acceptance_length=avg("acceptance_length"),
            acceptance_rate=avg("acceptance_rate"),
        )
    return out


PER_POSITION = "spec_decode_per_position_acceptance_rates"


def predicted_lengths(per_position: Sequence[float]) -> dict[int, float]:
    """The mean acceptance length when drafting k' tokens, k' = 1..k, from one run at k drafted tokens:
    1 + p_0 + ... + p_(k'-1), p_i the share of drafts whose position i was accepted. It assumes a
    drafter proposes the same first k' tokens whether it drafts k' or k (a chain drafter, top-1), and that
    position i's acceptance does not depend on how many follow it."""
    return {k: 1.0 + sum(per_position[:k]) for k in range(1, len(per_position) + 1)}


def predicted_fewer(per_position: Sequence[float]) -> dict[int, float]:
    """The predictions for every k' below the k that was drafted (k' = 1..k-1)."""
    return {k: v for k, v in predicted_lengths(per_position).items() if k < len(per_position)}


def per_position(summary: VllmSummary) -> list[float]:
    """A level's per-position acceptance rates (vLLM; empty without them)."""
    rates = summary.get(PER_POSITION)
    return [float(r) for r in rates] if isinstance(rates, list) else []


def predicted_below(summary: VllmSummary) -> dict[int, float]:
    """The predictions for every k' below the k a level drafted (none without per-position rates)."""
    return predicted_fewer(per_position(summary))


def compare(rows: list[Measured], *, baseline: str, spec_hash: str | None = None) -> Comparison:
    """`rows`: finished benchmarks, newest first."""
    if spec_hash is None:
        ref = next((m for m in rows if m.profile == baseline), rows[0] if rows else None)
    else:
        ref = next((m for m in rows if m.spec_hash == spec_hash), None)
    metric = "output throughput (tok/s) at the first load level"
    if ref is None:
        why = f"no benchmark with spec {spec_hash}" if spec_hash else "no benchmarks recorded yet"
        return Comparison(baseline, spec_hash, None, None, metric, notes=[why])
    out = Comparison(baseline, ref.spec_hash, ref.prompt_hash, ref.gpu_key, metric)
    first = ref.levels[0] if ref.levels else {}
    out.metric = f"output throughput (tok/s) at concurrency {first.get('max_concurrency') or '-'}" + (
        f", {first['request_rate']} req/s" if first.get("request_rate") not in (None, "inf") else ""
    )
    latest: dict[str, Measured] = {}
    skipped: set[str] = set()
    for m in rows:
        if m.profile in latest:
            continue
        like = m.spec_hash == ref.spec_hash and m.prompt_hash == ref.prompt_hash and m.gpu_key == ref.gpu_key
        if like:
            latest[m.profile] = m
    for m in rows:  # say why a profile with benchmarks is left out
        if m.profile not in latest and m.profile not in skipped:
            skipped.add(m.profile)
            what = (
                "spec"
                if m.spec_hash != ref.spec_hash
                else "prompts"
                if m.prompt_hash != ref.prompt_hash
                else "GPUs"
            )
            out.notes.append(
                f"{m.profile}: benchmarked with other {what} than run {ref.run_id}: not compared"
            )
    base_group = _group(latest[baseline], rows) if baseline in latest else None
    base = _row(baseline, base_group) if base_group else None
    if base is None:
        out.notes.append(f"baseline {baseline!r} has no benchmark of this spec: no speedups")
    for profile, m in sorted(latest.items(), key=lambda kv: (kv[0] != baseline, kv[0])):
        group = _group(m, rows)
        row = _row(profile, group)
        _verdict(row, base)
        out.rows.append(row)
        out.notes += crossed_versions(profile, group)
    out.notes += crossed_versions("the profiles compared", [latest[p] for p in sorted(latest)])
    if any(r.noise_assumed for r in out.rows if r.speedup is not None):
        out.notes.append(
            f"single runs have no measured spread: noise assumed {ASSUMED_NOISE:.0%} (use repeats)"
        )
    return out


def crossed_versions(what: str, group: list[Measured]) -> list[str]:
    """A note where the benchmarks of `group` ran on more than one version of one engine (an upgrade
    between them: the difference may be the engine's, not the profile's)."""
    seen: dict[str, set[str]] = {}
    for m in group:
        engine, version = m.provenance.get("engine"), m.provenance.get("engine_version")
        if isinstance(engine, str) and isinstance(version, str):
            seen.setdefault(engine, set()).add(version)
    return [
        f"{what} cross {engine} versions ({', '.join(sorted(versions))}): the engine changed between them"
        for engine, versions in sorted(seen.items())
        if len(versions) > 1
    ]


def _verdict(row: Row, base: Row | None) -> None:
    """The row's speedup over the baseline, the noise it is judged against, and the verdict; the same per
    category (per-stream throughput) where both sides have enough requests of it."""
    if base is None or not base.output_throughput or row.output_throughput is None:
        return
    is_base = row.profile == base.profile
    row.speedup, row.noise, row.noise_assumed, row.verdict = noise_band(
        row.output_throughput / base.output_throughput, row.throughput_cv, base.throughput_cv, is_base=is_base
    )
    for name, cat in row.categories.items():
        other = base.categories.get(name)
        if other is None or not other.stream_tok_s or cat.stream_tok_s is None:
            continue
        if min(cat.requests, other.requests) < MIN_CATEGORY_REQUESTS:
            cat.verdict = Verdict.TOO_FEW
            continue
        cat.speedup, _, _, cat.verdict = noise_band(
            cat.stream_tok_s / other.stream_tok_s, row.throughput_cv, base.throughput_cv, is_base=is_base
        )
    judged = sorted(
        ((c.speedup, n) for n, c in row.categories.items() if c.speedup and not is_base), reverse=True
    )
    row.per_category = ", ".join(f"{x:.2f}x on {n}" for x, n in judged) or None  # the fastest first
