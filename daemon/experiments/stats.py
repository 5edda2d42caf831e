"""Verdicts a reviewer accepts, from per-request figures (verdicts that cancel drift and say how sure they
are): the ratio of two profiles' means with a bootstrap confidence interval (scipy.stats.bootstrap, BCa), a
Mann-Whitney U test and its effect size (the rank-biserial correlation), and the requests it would take to
tell a difference of a given size apart. A difference is declared only where the 95% interval excludes 1, the
U test agrees at p < 0.01 in the same direction and it is at least MIN_EFFECT (1%): a false "faster" or
"slower" in about 1 experiment of 100 (a 95% interval alone: 1 in 20, which 200 simulated experiments showed
as 11 of 200). The planner asks for the requests at that level. A throughput (a ratio of sums) is judged by
its interval at 1 - 0.01. Rounds: requests of one round share its conditions (the host's load that minute, the
engine's state), so they are not independent. With at least two rounds a side, the interval comes from the
rounds' own figures (each round's mean, or its rate, on a log scale; Welch's t with its degrees of freedom)
and a difference is declared where the (1 - ALPHA) interval excludes 1; the request-level U test would count
one round's shared luck as many independent observations. With one round a side the interval covers
request-to-request noise only, and says so (`scope`). Drift: a trend in one profile's own figures over the
rounds of an experiment. Pure; no I/O, no clock."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from daemon.experiments.verdict_types import MIN_EFFECT, Judged, Verdict

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

CONFIDENCE = 0.95
ALPHA = 0.01  # the U test's level for a declared difference
RESAMPLES = 2000
MIN_SAMPLES = 8  # per side: fewer and no interval is claimed
Rounds = tuple[Sequence[int], Sequence[int]]  # each side's figures per round, in order (counts)


def ratio_of_means(
    base: Sequence[float],
    other: Sequence[float],
    *,
    lower_is_better: bool,
    rounds: Rounds | None = None,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Judged | None:
    """The ratio of the means (a latency: the baseline's over the profile's). None with fewer than
    MIN_SAMPLES figures on a side (or a mean of zero). `rounds`: how the figures split into rounds."""
    import numpy as np  # here: scipy and numpy cost the daemon's start a second, and most runs judge nothing

    a, b = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    if min(a.size, b.size) < MIN_SAMPLES or a.mean() <= 0 or b.mean() <= 0:
        return None
    if (split := _split(rounds, a.size, b.size)) is not None:
        la = [float(np.log(x.mean())) for x in np.split(a, split[0])]
        lb = [float(np.log(x.mean())) for x in np.split(b, split[1])]
        return _between_rounds(
            float(a.mean() / b.mean() if lower_is_better else b.mean() / a.mean()),
            (lb, la) if lower_is_better else (la, lb),
            (a.size, b.size),
            confidence,
        )

    def ratio(ia: NDArray[np.intp], ib: NDArray[np.intp]) -> NDArray[np.float64]:
        ma, mb = a[ia].mean(axis=-1), b[ib].mean(axis=-1)
        out: NDArray[np.float64] = ma / mb if lower_is_better else mb / ma
        return out

    return _judged(ratio, (a.size, b.size), (a, b), lower_is_better, confidence, seed)


def ratio_of_rates(
    base: tuple[Sequence[float], Sequence[float]],
    other: tuple[Sequence[float], Sequence[float]],
    *,
    rounds: Rounds | None = None,
    confidence: float = CONFIDENCE,
    seed: int = 0,
) -> Judged | None:
    """Output throughput: each side's (tokens, seconds) per request, its rate the sum of tokens over the sum
    of seconds, as the aggregate throughput weighs them (a mean of per-request rates would count a short
    fast request as much as a long slow one: with a mix of prompt kinds the two disagree). The interval
    resamples whole requests. No rank test fits a ratio of sums (most requests may be slower while the
    total is faster), so a difference is declared where the (1 - ALPHA) interval excludes 1."""
    import numpy as np

    (ta, sa), (tb, sb) = (tuple(np.asarray(x, dtype=float) for x in side) for side in (base, other))
    ok_a, ok_b = (ta > 0) & (sa > 0), (tb > 0) & (sb > 0)
    split = _split(rounds, ta.size, tb.size)
    ta, sa, tb, sb = ta[ok_a], sa[ok_a], tb[ok_b], sb[ok_b]
    if min(ta.size, tb.size) < MIN_SAMPLES:
        return None
    if split is not None:  # each round's rate: its tokens over its seconds (the empty requests left out)
        la = [float(np.log(t.sum() / x.sum())) for t, x in _rounds_of(ok_a, split[0], ta, sa)]
        lb = [float(np.log(t.sum() / x.sum())) for t, x in _rounds_of(ok_b, split[1], tb, sb)]
        if len(la) >= 2 and len(lb) >= 2:
            point = float(tb.sum() / sb.sum() / (ta.sum() / sa.sum()))
            return _between_rounds(point, (la, lb), (ta.size, tb.size), confidence)

    def ratio(ia: NDArray[np.intp], ib: NDArray[np.intp]) -> NDArray[np.float64]:
        rate_a = ta[ia].sum(axis=-1) / sa[ia].sum(axis=-1)
        out: NDArray[np.float64] = tb[ib].sum(axis=-1) / sb[ib].sum(axis=-1) / rate_a
        return out

    return _judged(ratio, (ta.size, tb.size), None, False, confidence, seed)


def _judged(
    ratio: Callable[[NDArray[np.intp], NDArray[np.intp]], NDArray[np.float64]],
    sizes: tuple[int, int],
    ranked: tuple[NDArray[np.float64], NDArray[np.float64]] | None,  # what the U test compares (None: none)
    lower_is_better: bool,  # of the ranked figures
    confidence: float,
    seed: int,
) -> Judged | None:
    """The bootstrap interval of `ratio` (over requests: it is given index arrays), the U test, the verdict:
    a difference only where the interval excludes 1 and the U test agrees at p < ALPHA (without a U test:
    where the interval at 1 - ALPHA excludes 1)."""
    import numpy as np
    from scipy import stats

    na, nb = sizes
    point = float(ratio(np.arange(na), np.arange(nb)))

    def statistic(ia: NDArray[np.float64], ib: NDArray[np.float64], axis: int = -1) -> NDArray[np.float64]:
        return ratio(ia.astype(np.intp), ib.astype(np.intp))

    with warnings.catch_warnings():  # identical figures (a degenerate sample): no interval, said below
        warnings.simplefilter("ignore")
        data = (np.arange(na), np.arange(nb))
        rng = np.random.default_rng(seed)
        bootstrap = functools.partial(
            stats.bootstrap, data, statistic, vectorized=True, paired=False, method="BCa", rng=rng
        )
        found = bootstrap(confidence_level=confidence, n_resamples=RESAMPLES)
        interval = found.confidence_interval
        if ranked is not None:
            a, b = ranked
            u = stats.mannwhitneyu(b, a, alternative="two-sided")
            p: float | None = float(u.pvalue)
            effect: float | None = 2.0 * float(u.statistic) / (na * nb) - 1.0  # P(b > a) - P(b < a)
            strict = (float(interval.low), float(interval.high))
        else:  # the same resamples, the stricter level
            p, effect = None, None
            wide = bootstrap(
                confidence_level=1.0 - ALPHA, n_resamples=0, bootstrap_result=found
            ).confidence_interval
            strict = (float(wide.low), float(wide.high))
    low, high = float(interval.low), float(interval.high)
    if not all(math.isfinite(v) for v in (point, low, high, *strict, p if p is not None else 0.0)):
        return None  # no spread to judge by (every request alike): JSON has no NaN either
    if effect is None:  # a rate: its interval at 1 - ALPHA
        up, down = strict[0] > 1.0, strict[1] < 1.0
    else:
        better = -effect if lower_is_better else effect
        sure = p is not None and p < ALPHA
        up, down = low > 1.0 and sure and better > 0, high < 1.0 and sure and better < 0
    big = abs(point - 1.0) >= MIN_EFFECT
    verdict = Verdict.FASTER if up and big else Verdict.SLOWER if down and big else Verdict.NO_DIFFERENCE
    more, resolvable = None, None
    if verdict is Verdict.NO_DIFFERENCE:
        resolvable = max(abs(point - 1.0), MIN_EFFECT)
        n = min(na, nb)
        half = max((high - low) / 2.0, 1e-9)
        more = max(0, math.ceil(n * (half / resolvable) ** 2) - n)
    return Judged(point, low, high, p, effect, verdict, (na, nb), more, resolvable)


def _split(rounds: Rounds | None, na: int, nb: int) -> tuple[list[int], list[int]] | None:
    """Where each side's figures split into rounds (np.split's indices), when both sides have two rounds or
    more and the counts add up; None otherwise (the request-level interval)."""
    if rounds is None:
        return None
    ra, rb = ([n for n in side if n > 0] for side in rounds)
    if min(len(ra), len(rb)) < 2 or (sum(ra), sum(rb)) != (na, nb):
        return None
    return ([sum(ra[: i + 1]) for i in range(len(ra) - 1)], [sum(rb[: i + 1]) for i in range(len(rb) - 1)])


def _rounds_of(
    ok: NDArray[np.bool_], cuts: list[int], *kept: NDArray[np.float64]
) -> list[tuple[NDArray[np.float64], ...]]:
    """The kept figures (those where `ok`) of each round that kept any, per round."""
    import numpy as np

    per_round = [int(x.sum()) for x in np.split(ok, cuts)]
    edges = np.cumsum(per_round)[:-1].tolist()
    parts = [np.split(k, edges) for k in kept]
    return [tuple(p[i] for p in parts) for i, n in enumerate(per_round) if n > 0]


def _between_rounds(
    point: float,
    logs: tuple[Sequence[float], Sequence[float]],  # (the worse-if-larger side, the better-if-larger side)
    samples: tuple[int, int],
    confidence: float,
) -> Judged | None:
    """The interval of `point` from the rounds' own figures (log scale): Welch's t over the two sides' round
    figures, its degrees of freedom by Welch-Satterthwaite. A difference where the (1 - ALPHA) interval
    excludes 1 and is at least MIN_EFFECT."""
    from scipy import stats

    (la, lb), (ka, kb) = logs, (len(logs[0]), len(logs[1]))
    found = welch(la, lb)
    if found is None or point <= 0 or not math.isfinite(point):
        return None  # every round alike: nothing to scale an interval by
    se, df = found
    center = math.log(point)

    def interval(level: float) -> tuple[float, float]:
        t = float(stats.t.ppf(0.5 + level / 2.0, df))
        return math.exp(center - t * se), math.exp(center + t * se)

    (low, high), strict = interval(confidence), interval(1.0 - ALPHA)
    p = float(2.0 * stats.t.sf(abs(center) / se, df))
    big = abs(point - 1.0) >= MIN_EFFECT
    up, down = strict[0] > 1.0 and big, strict[1] < 1.0 and big
    verdict = Verdict.FASTER if up else Verdict.SLOWER if down else Verdict.NO_DIFFERENCE
    more, resolvable = None, None
    if verdict is Verdict.NO_DIFFERENCE:
        resolvable = max(abs(point - 1.0), MIN_EFFECT)
        n = min(ka, kb)
        more = max(0, math.ceil(n * (max((high - low) / 2.0, 1e-9) / resolvable) ** 2) - n)
    return Judged(point, low, high, p, None, verdict, samples, more, resolvable, (ka, kb), "rounds")


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float] | None:
    """The standard error of the difference of two samples' means (two or more each) and its degrees of
    freedom by Welch-Satterthwaite; None where neither sample varies."""
    ka, kb = len(a), len(b)
    va, vb = _variance(a) / ka, _variance(b) / kb
    se = math.sqrt(va + vb)
    if not se > 0:
        return None
    return se, (va + vb) ** 2 / (va**2 / (ka - 1) + vb**2 / (kb - 1))


def _variance(xs: Sequence[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def rounds_for(
    request_cv: float,
    round_cv: float,
    requests: int,
    difference: float,
    *,
    power: float = 0.9,
    alpha: float = ALPHA,
) -> int:
    """Rounds a side for a difference (relative) to be told apart with this power when each round has
    `requests` requests of spread `request_cv` and rounds differ among themselves by `round_cv` (the shared
    conditions): the smallest k with 2 (t_(1-alpha/2) + t_power)^2 (round_cv^2 + request_cv^2 / requests)
    / k <= d^2, t on Welch's 2k - 2 degrees of freedom."""
    from scipy import stats

    per_round = round_cv**2 + request_cv**2 / requests
    for k in range(2, 1000):
        df = 2 * k - 2
        z = float(stats.t.ppf(1.0 - alpha / 2.0, df) + stats.t.ppf(power, df))
        if 2.0 * z**2 * per_round / k <= math.log1p(difference) ** 2:
            return k
    return 1000


def requests_for(cv: float, difference: float, *, power: float = 0.9, alpha: float = ALPHA) -> int:
    """Requests a side for a difference of the means (relative, e.g. 0.03) to be told apart with this
    power, at this per-request spread (coefficient of variation): 2 ((z_(1-alpha/2) + z_power) cv / d)^2."""
    z = NormalDist().inv_cdf
    return math.ceil(2.0 * ((z(1.0 - alpha / 2.0) + z(power)) * cv / difference) ** 2)


def spread(values: Sequence[float]) -> float:
    """The per-request coefficient of variation (what requests_for plans from)."""
    import numpy as np

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
    import numpy as np
    from scipy import stats

    x = np.concatenate([np.full(len(r), i, dtype=float) for i, r in enumerate(rounds)])
    y = np.concatenate([np.asarray(r, dtype=float) for r in rounds])
    fit = stats.linregress(x, y)
    per_round = float(fit.slope / y.mean())
    total = abs(per_round) * (len(rounds) - 1)
    return Drift(per_round, float(fit.pvalue), bool(fit.pvalue < alpha and total > min_change))
