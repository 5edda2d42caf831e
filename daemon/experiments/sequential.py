"""Early stop for interleaved rounds (`--until-decided`: an experiment that stops once decided), pure: a
group-sequential test. After each round from the second, every judged metric's rounds are tested (Welch's t on
the log of the two sides' round figures, as stats.py judges rounds) at the level that an O'Brien-Fleming-type
alpha-spending function releases at that look (Lan & DeMets 1983, "Discrete sequential boundaries for clinical
trials", Biometrika 70:659-663; O'Brien & Fleming 1979): alpha(t) = 2 - 2 Phi(z_(1 - ALPHA/2) / sqrt(t)), t
the share of the planned rounds done. The increments are spent as Bonferroni would (each look at its own
increment), which keeps the error over all looks at or under ALPHA however many looks there are; the spending
keeps early looks strict, so a difference is stopped for early only when it is plain. An experiment stops when
every metric is decided, or at the planned rounds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from daemon.experiments.stats import ALPHA, welch
from daemon.experiments.verdict_types import MIN_EFFECT


def spent(t: float, alpha: float = ALPHA) -> float:
    """The error spent by the share `t` of the planned information (0: none, 1: all of alpha)."""
    if t <= 0:
        return 0.0
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(min(t, 1.0)))


def look_alpha(rounds: int, planned: int, alpha: float = ALPHA) -> float:
    """The level of the look after `rounds` rounds (2..planned): looks 2..planned share alpha."""
    looks = max(1, planned - 1)
    k = rounds - 1
    return spent(k / looks, alpha) - spent((k - 1) / looks, alpha)


@dataclass(frozen=True)
class Look:
    rounds: int
    level: float  # the alpha this look may spend
    p: float | None  # Welch's p of the log ratio (None: no spread to judge by)
    ratio: float  # B over A, of the round figures' geometric means

    @property
    def different(self) -> bool:
        return self.p is not None and self.p < self.level and abs(self.ratio - 1.0) >= MIN_EFFECT


def look(a: Sequence[float], b: Sequence[float], planned: int, alpha: float = ALPHA) -> Look:
    """One look at two sides' round figures (positive: rates or means), after min(len) rounds."""
    from scipy import stats

    la, lb = [math.log(x) for x in a], [math.log(x) for x in b]
    ka, kb = len(la), len(lb)
    rounds = min(ka, kb)
    ma, mb = sum(la) / ka, sum(lb) / kb
    level = look_alpha(rounds, planned, alpha)
    found = welch(la, lb) if rounds >= 2 else None
    if found is None:  # one round, or no spread to judge by
        return Look(rounds, level, None, math.exp(mb - ma))
    se, df = found
    p = float(2.0 * stats.t.sf(abs(mb - ma) / se, df))
    return Look(rounds, level, p, math.exp(mb - ma))


def stop(looks: Sequence[Look], rounds: int, planned: int) -> str | None:
    """Why the experiment stops after this round (every metric decided, or the plan done); None: go on."""
    if rounds >= planned:
        return f"the planned {planned} rounds are done"
    if looks and all(lk.different for lk in looks):
        said = ", ".join(f"{lk.ratio:.3f}x (p {lk.p:.2g} < {lk.level:.2g})" for lk in looks)
        return f"decided after {rounds} of {planned} rounds: {said}"
    return None
