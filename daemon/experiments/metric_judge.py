"""The one judge: is a profile faster than the baseline on one metric? Every verdict of the comparison,
the experiment's last event and the sweep's ranking comes from here. With enough requests a side it is
judged from them (stats.py: the ratio of the rates for throughput, of the means for a latency, the interval
over the rounds where there are two or more); with fewer, from the repeats' noise band. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from daemon.experiments import stats
from daemon.experiments.verdict_types import Judged, Verdict

# Each side's per-request figures by metric, and how many of each came from each round (in order).
Figures = tuple[Mapping[str, Sequence[float]], Mapping[str, Sequence[int]]]
# metric -> lower is better. "throughput" is judged as the aggregate weighs it: the sum of tokens over the
# sum of request seconds (its figures are "tokens" and "seconds", paired).
LOWER_IS_BETTER = {"throughput": False, "ttft": True, "tpot": True, "itl": True, "e2el": True}
ASSUMED_NOISE = 0.05  # a side with a single run: its spread is unknown, this much is assumed (and said)
NOISE_FLOOR = 0.01


def judge(metric: str, base: Figures, mine: Figures, *, lower_is_better: bool | None = None) -> Judged | None:
    """`mine` against `base` on `metric` (`lower_is_better`: for a metric outside LOWER_IS_BETTER). None
    with too few requests a side to judge from them."""
    (a, a_rounds), (b, b_rounds) = base, mine
    if metric == "throughput":
        return stats.ratio_of_rates(
            (a.get("tokens", []), a.get("seconds", [])),
            (b.get("tokens", []), b.get("seconds", [])),
            rounds=(a_rounds.get("tokens", []), b_rounds.get("tokens", [])),
        )
    lower = LOWER_IS_BETTER[metric] if lower_is_better is None else lower_is_better
    return stats.ratio_of_means(
        a.get(metric, []),
        b.get(metric, []),
        lower_is_better=lower,
        rounds=(a_rounds.get(metric, []), b_rounds.get(metric, [])),
    )


def noise_band(
    ratio: float, cv: float | None, base_cv: float | None, *, is_base: bool
) -> tuple[float, float, bool, Verdict]:
    """Too few requests to judge from them: (ratio, noise, noise assumed, verdict) of a ratio over the
    baseline (above 1: better), the noise two standard errors of the ratio from both sides' repeats,
    assumed when a side has a single run."""
    cvs = [c for c in (cv, base_cv) if c is not None]
    assumed = len(cvs) < 2 and not is_base
    noise = ASSUMED_NOISE if assumed else max(NOISE_FLOOR, 2 * math.sqrt(sum(c * c for c in cvs)))
    if is_base:
        verdict = Verdict.BASELINE
    elif ratio > 1 + noise:
        verdict = Verdict.FASTER
    elif ratio < 1 - noise:
        verdict = Verdict.SLOWER
    else:
        verdict = Verdict.WITHIN_NOISE
    return ratio, noise, assumed, verdict
