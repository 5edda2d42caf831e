"""The one Verdict, from the judge (experiments/metric_judge.py) to the store's records, the API, the CLI and
the page, and what one judged metric holds (Judged). Pure types."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(enum.StrEnum):
    """A profile against the baseline on one metric."""

    BASELINE = "baseline"  # the row of the baseline itself
    FASTER = "faster"
    SLOWER = "slower"
    NO_DIFFERENCE = "no difference detected"  # judged from the requests: the interval holds 1 (or < 1%)
    WITHIN_NOISE = "within noise"  # too few requests to judge: inside the repeats' noise band
    TOO_FEW = "too few requests"  # a prompt category with too few requests on a side


# A difference smaller than this is no difference to an operator, however sure: two equal engines whose
# requests barely vary (the sandbox's) would otherwise be "faster: 1.00x [1.00, 1.01]".
MIN_EFFECT = 0.01


@dataclass(frozen=True)
class Judged:
    """One metric of one profile against the baseline. `ratio` > 1 is better for the profile (for a latency
    the baseline's mean over the profile's)."""

    ratio: float
    low: float
    high: float
    p_value: float | None  # the U test's (None: a rate, judged by its interval alone)
    effect: float | None  # rank-biserial correlation of the profile's figures over the baseline's (-1..1)
    verdict: Verdict  # faster | slower | no difference detected
    samples: tuple[int, int]  # (baseline, profile)
    more_needed: int | None  # no difference: `unit`s a side to tell apart a difference of `resolvable`
    resolvable: float | None  # that difference (the larger of the observed one and MIN_EFFECT)
    rounds: tuple[int, int] = (1, 1)  # each side's rounds
    # what the interval covers: "requests" (one round a side: request-to-request noise only) or "rounds"
    scope: str = "requests"

    @property
    def unit(self) -> str:
        return "rounds" if self.scope == "rounds" else "requests"

    @property
    def within_margin(self) -> bool:
        """The whole interval within ±MIN_EFFECT of 1: as good as equal."""
        return 1.0 - MIN_EFFECT <= self.low and self.high <= 1.0 + MIN_EFFECT

    def text(self) -> str:
        interval = f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"
        if self.verdict is not Verdict.NO_DIFFERENCE:
            return f"{self.verdict}: {interval}"
        if self.within_margin:
            return f"no difference detected: {interval}, within ±{100 * MIN_EFFECT:.0f}%"
        if not self.more_needed:  # sure enough, but the interval reaches past the margin
            return f"no difference detected: {interval}"
        need = f" would need ~{self.more_needed} more {self.unit}"
        return f"no difference detected: ±{100 * (self.resolvable or 0):.1f}%{need}"
