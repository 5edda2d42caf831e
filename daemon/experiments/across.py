"""Two profiles across load (which serves more at which load), pure: each level's ratio of B over A with its
interval from the rounds, the load at which B stops paying (the crossover) with its uncertainty, and the
capacity ratio under an SLO.

A level's ratio is the ratio of the geometric means of the two profiles' round figures, its 99% interval
Welch's t on their logs (as stats.py judges rounds). The crossover is estimated from the per-level ratios,
not read off one level: where the log ratio, linear in log load between the two levels around its change
of sign, reaches 0. Its interval comes from the levels' own uncertainty: the log ratios drawn again from
their t distributions (`DRAWS` times, a fixed seed), each draw's crossing found the same way, and the 0.5th
and 99.5th percentiles taken (ALPHA, as every verdict's); the share of draws with a crossing at all says
how sure the change is."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from daemon.core.jsontypes import VllmSummary
from daemon.experiments.stats import ALPHA, welch
from daemon.measure import capacity
from daemon.store.bench import BenchmarkView

DRAWS = 4000


@dataclass(frozen=True)
class LevelRatio:
    load: float  # the level's concurrency or request rate
    ratio: float  # B over A
    low: float | None  # its 99% interval (None: one round, or no spread)
    high: float | None
    rounds: int
    se: float | None = None  # of the log ratio
    df: float | None = None

    def text(self) -> str:
        band = f" [{self.low:.2f}, {self.high:.2f}]" if self.low is not None and self.high is not None else ""
        return f"{self.ratio:.2f}x{band}"


@dataclass(frozen=True)
class Crossover:
    at: float  # the load where B's ratio reaches 1
    low: float | None  # its 99% interval from the levels' uncertainty
    high: float | None
    share: float  # of the redrawn ratios, how many cross at all
    faster_below: bool  # B is faster below the crossover (speculation at low load)


def level_ratio(load: float, a: Sequence[float], b: Sequence[float]) -> LevelRatio:
    """One level: A's and B's figures, one per round (positive: throughputs, capacities)."""
    from scipy import stats

    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    diff = sum(lb) / len(lb) - sum(la) / len(la)
    rounds = min(len(la), len(lb))
    found = welch(la, lb) if rounds >= 2 else None
    if found is None:
        return LevelRatio(load, math.exp(diff), None, None, rounds)
    se, df = found
    t = float(stats.t.ppf(1 - ALPHA / 2, df))
    return LevelRatio(load, math.exp(diff), math.exp(diff - t * se), math.exp(diff + t * se), rounds, se, df)


def _crossing(loads: Sequence[float], logs: Sequence[float], falling: bool) -> float | None:
    """Where the log ratio first changes sign in the given direction (falling: from above 0 to below)."""
    for i in range(len(logs) - 1):
        a, b = logs[i], logs[i + 1]
        if (a > 0 >= b) if falling else (a < 0 <= b):
            t = a / (a - b)
            x0, x1 = math.log(loads[i]), math.log(loads[i + 1])
            return math.exp(x0 + t * (x1 - x0))
    return None


def crossover(levels: Sequence[LevelRatio], *, seed: int = 0) -> Crossover | None:
    """The crossover of the levels' ratios (in load order); None where the point estimates do not cross."""
    import numpy as np

    loads = [lv.load for lv in levels]
    logs = [math.log(lv.ratio) for lv in levels]
    falling = bool(logs and logs[0] > 0)
    at = _crossing(loads, logs, falling)
    if at is None:
        return None
    if any(lv.se is None or lv.df is None for lv in levels):
        return Crossover(at, None, None, 1.0, falling)
    rng = np.random.default_rng(seed)
    drawn = np.array(
        [m + (lv.se or 0.0) * rng.standard_t(lv.df or 1.0, DRAWS) for m, lv in zip(logs, levels, strict=True)]
    )
    found = [x for col in drawn.T if (x := _crossing(loads, list(col), falling)) is not None]
    if not found:
        return Crossover(at, None, None, 0.0, falling)
    low, high = (float(v) for v in np.percentile(found, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)]))
    return Crossover(at, low, high, len(found) / DRAWS, falling)


def summary(b: str, unit: str, levels: Sequence[LevelRatio], cross: Crossover | None) -> str:
    """ "vllm-eagle3 faster up to ~4.8 concurrency [3.9, 6.1], slower above: 1.41x [1.30, 1.52] at 1, ..."."""
    each = ", ".join(f"{lv.text()} at {lv.load:g}" for lv in levels)
    if cross is None:
        if all(lv.ratio >= 1 for lv in levels):
            return f"{b} faster or even at every {unit} measured: {each}"
        if all(lv.ratio <= 1 for lv in levels):
            return f"{b} slower or even at every {unit} measured: {each}"
        return f"{b} across {unit}: {each}"
    band = f" [{cross.low:.3g}, {cross.high:.3g}]" if cross.low is not None and cross.high is not None else ""
    sure = f" ({cross.share:.0%} of redrawn ratios cross)" if cross.share < 0.95 else ""
    below, above = ("faster", "slower") if cross.faster_below else ("slower", "faster")
    return f"{b} {below} up to ~{cross.at:.3g} {unit}{band}, {above} above{sure}: {each}"


def capacity_ratio(a: Sequence[tuple[float, float | None]], b: Sequence[tuple[float, float | None]]) -> str:
    """B's capacity under the SLO over A's, from each round's (proven capacity, lowest rate missed); with
    one round the interval is the brackets' (B's lowest over A's highest, and the other way round)."""
    ra = level_ratio(0.0, [x for x, _ in a], [x for x, _ in b])
    if ra.low is not None and ra.high is not None:
        return f"capacity under the SLO {ra.text()} ({ra.rounds} rounds)"
    (lo_a, hi_a), (lo_b, hi_b) = a[0], b[0]
    if hi_a is None or hi_b is None:
        return f"capacity under the SLO {ra.ratio:.2f}x (a search found no upper end: no interval)"
    return f"capacity under the SLO {ra.ratio:.2f}x [{lo_b / hi_a:.2f}, {hi_b / lo_a:.2f}] (the brackets)"


def _figure(summary: VllmSummary, by_rate: bool) -> float:
    """What a level is judged on: output throughput at a concurrency; at a request rate, where both sides
    serve the same load, the inverse of the median E2E latency (shorter requests: faster)."""
    if by_rate:
        e2el = float(summary.get("median_e2el_ms") or 0.0)
        return 1000.0 / e2el if e2el > 0 else 0.0
    return float(summary.get("output_throughput") or 0.0)


def across_load(a: Sequence[BenchmarkView], b: Sequence[BenchmarkView]) -> list[str]:
    """The experiment's lines across load for B against A, from each round's benchmark of each: the
    capacity ratio of capacity searches, or the per-level ratios and the crossover of two or more levels."""
    if not a or not b:
        return []
    name = b[0].bench.profile
    searched = [[capacity.of_run(v) for v in side] for side in (a, b)]
    if all(found is not None for side in searched for found in side):
        ca, cb = ([(f.capacity, f.lowest_missed) for f in side if f is not None] for side in searched)
        if any(x is None for x, _ in (*ca, *cb)):
            return [f"{name}: capacity under the SLO: a search found none, no ratio"]
        return [f"{name}: " + capacity_ratio(*([(x or 0.0, hi) for x, hi in side] for side in (ca, cb)))]
    n = min(len(v.summaries) for v in (*a, *b))
    if n < 2:
        return []
    by_rate = a[0].levels[0].request_rate is not None
    loads = [float((lv.request_rate if by_rate else lv.concurrency) or 0.0) for lv in a[0].levels[:n]]
    per = [[[_figure(v.summaries[i], by_rate) for v in side] for side in (a, b)] for i in range(n)]
    if any(x <= 0 for lv in per for side in lv for x in side) or any(x <= 0 for x in loads):
        return []
    levels = [level_ratio(x, fa, fb) for x, (fa, fb) in zip(loads, per, strict=True)]
    unit = "req/s" if by_rate else "concurrency"
    return [summary(name, unit, levels, crossover(levels))]
