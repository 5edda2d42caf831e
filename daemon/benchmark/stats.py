"""Verdicts a reviewer accepts, from per-request figures (#37): the ratio of two profiles' means with a
bootstrap confidence interval (scipy.stats.bootstrap, BCa), a Mann-Whitney U test and its effect size (the
rank-biserial correlation), and the requests it would take to tell a difference of a given size apart.
A difference is declared only where the 95% interval excludes 1 and the U test agrees at p < 0.01 in the
same direction: a false "faster" or "slower" in about 1 experiment of 100 (a 95% interval alone: 1 in 20,
which 200 simulated experiments showed as 11 of 200). The planner asks for the requests at that level.
Drift: a trend in one profile's own figures over the rounds of an experiment. Pure; no I/O, no clock."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 0.01  # the U test's level for a declared difference
RESAMPLES = 2000
MIN_SAMPLES = 8  # per side: fewer and no interval is claimed


@dataclass(frozen=True)
class Judged:
    """One metric of one profile against the baseline. `ratio` > 1 is better for the profile (for a latency
    the baseline's mean over the profile's)."""

    ratio: float
    low: float
    high: float
    p_value: float
    effect: float  # rank-biserial correlation of the profile's figures over the baseline's (-1..1)
    verdict: str  # faster | slower | no difference detected
    samples: tuple[int, int]  # (baseline, profile)
    more_needed: int | None  # no difference: requests a side to tell apart a difference of `resolvable`
    resolvable: float | None  # that difference (the larger of the observed one and half a percent)

    def text(self) -> str:
        if self.verdict != "no difference detected":
            return f"{self.verdict}: {self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"
        need = f" would need ~{self.more_needed} more requests" if self.more_needed else ""
        return f"no difference detected: ±{100 * (self.resolvable or 0):.1f}%{need}"


def judge(
    base: Sequence[float],
    other: Sequence[float],
    *,
    lower_is_better: bool,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Judged | None:
    """None with fewer than MIN_SAMPLES figures on a side (or a mean of zero)."""
    a, b = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if min(a.size, b.size) < MIN_SAMPLES or a.mean() <= 0 or b.mean() <= 0:
        return None

    def speedup(x: NDArray[np.float64], y: NDArray[np.float64], axis: int = -1) -> NDArray[np.float64]:
        ratio: NDArray[np.float64] = (
            x.mean(axis=axis) / y.mean(axis=axis)
            if lower_is_better
            else y.mean(axis=axis) / x.mean(axis=axis)
        )
        return ratio

    ratio = float(speedup(a, b))
    interval = stats.bootstrap(
        (a, b),
        speedup,
        vectorized=True,
        paired=False,
        confidence_level=confidence,
        n_resamples=RESAMPLES,
        method="BCa",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    low, high = float(interval.low), float(interval.high)
    u = stats.mannwhitneyu(b, a, alternative="two-sided")
    effect = 2.0 * float(u.statistic) / (a.size * b.size) - 1.0  # P(b > a) - P(b < a)
    better = -effect if lower_is_better else effect
    if low > 1.0 and u.pvalue < ALPHA and better > 0:
        verdict = "faster"
    elif high < 1.0 and u.pvalue < ALPHA and better < 0:
        verdict = "slower"
    else:
        verdict = "no difference detected"
    more, resolvable = None, None
    if verdict == "no difference detected":
        resolvable = max(abs(ratio - 1.0), 0.005)
        n = min(a.size, b.size)
        half = max((high - low) / 2.0, 1e-9)
        more = max(0, math.ceil(n * (half / resolvable) ** 2) - n)
    return Judged(ratio, low, high, float(u.pvalue), effect, verdict, (a.size, b.size), more, resolvable)


def requests_for(cv: float, difference: float, *, power: float = 0.9, alpha: float = ALPHA) -> int:
    """Requests a side for a difference of the means (relative, e.g. 0.03) to be told apart with this
    power, at this per-request spread (coefficient of variation): 2 ((z_(1-alpha/2) + z_power) cv / d)^2."""
    z = NormalDist().inv_cdf
    return math.ceil(2.0 * ((z(1.0 - alpha / 2.0) + z(power)) * cv / difference) ** 2)


def spread(values: Sequence[float]) -> float:
    """The per-request coefficient of variation (what requests_for plans from)."""
    x = np.asarray(values, dtype=float)
    return float(x.std(ddof=1) / x.mean()) if x.size > 1 and x.mean() > 0 else 0.0


@dataclass(frozen=True)
class Drift:
    per_round: float  # the fitted change from one round to the next, relative to the mean
    p_value: float
    flagged: bool


def drift(
    rounds: Sequence[Sequence[float]], *, alpha: float = 0.01, min_change: float = 0.01
) -> Drift | None:
    """A trend in one profile's own per-request figures over the rounds (a linear fit against the round):
    flagged when it is significant (p < alpha) and moves the figure by more than `min_change` over the
    experiment. None with fewer than two rounds."""
    if len(rounds) < 2 or any(len(r) == 0 for r in rounds):
        return None
    x = np.concatenate([np.full(len(r), i, dtype=float) for i, r in enumerate(rounds)])
    y = np.concatenate([np.asarray(r, dtype=float) for r in rounds])
    fit = stats.linregress(x, y)
    per_round = float(fit.slope / y.mean())
    total = abs(per_round) * (len(rounds) - 1)
    return Drift(per_round, float(fit.pvalue), bool(fit.pvalue < alpha and total > min_change))
