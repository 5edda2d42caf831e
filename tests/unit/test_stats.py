"""The statistics behind an A/B verdict (#37), on synthetic per-request figures of known distributions:
a true 3% difference is found with the requests the planner asks for; at no difference the verdict is "no
difference detected" in at least 95% of 200 simulated experiments; a planted drift is flagged."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.benchmark.stats import drift, judge, judge_rate, requests_for, spread

CV = 0.10  # per-request spread of a latency like TPOT on a busy engine


def _tpot(rng: np.random.Generator, mean_ms: float, n: int) -> list[float]:
    """Log-normal per-request figures with mean `mean_ms` and coefficient of variation CV."""
    sigma = np.sqrt(np.log(1 + CV**2))
    return list(rng.lognormal(np.log(mean_ms) - sigma**2 / 2, sigma, n))


def test_a_true_3_percent_difference_is_found_with_the_planned_requests() -> None:
    n = requests_for(CV, 0.03, power=0.9)
    assert 320 < n < 340  # 2 ((2.58 + 1.28) x 0.10 / 0.03)^2 = 331
    rng = np.random.default_rng(3)
    found = covered = 0
    for i in range(40):
        base, faster = _tpot(rng, 20.0, n), _tpot(rng, 20.0 / 1.03, n)  # 3% faster
        j = judge(base, faster, lower_is_better=True, seed=i)
        assert j is not None
        found += j.verdict == "faster"
        covered += j.low <= 1.03 <= j.high
        assert j.verdict != "slower"
    assert found >= 32  # the plan's power is 90%: at least 80% of 40 found
    assert covered >= 34  # a 95% interval holds the true ratio (38 of 40 expected)


def test_no_difference_is_said_in_at_least_95_percent_of_200_experiments() -> None:
    rng = np.random.default_rng(7)
    verdicts = []
    for i in range(200):
        j = judge(_tpot(rng, 20.0, 120), _tpot(rng, 20.0, 120), lower_is_better=True, seed=i)
        assert j is not None
        verdicts.append(j.verdict)
    assert verdicts.count("no difference detected") >= 190, {v: verdicts.count(v) for v in set(verdicts)}


def test_the_answer_says_the_interval_or_how_many_more_requests() -> None:
    rng = np.random.default_rng(11)
    clear = judge(_tpot(rng, 20.0, 300), _tpot(rng, 18.0, 300), lower_is_better=True)
    assert clear is not None
    assert clear.verdict == "faster"
    assert clear.text().startswith("faster: 1.1")
    assert clear.low > 1.0
    thr = judge([100.0 + x for x in range(10)], [90.0 + x for x in range(10)], lower_is_better=False)
    assert thr is not None
    assert thr.verdict == "slower"  # throughput: higher is better
    vague = judge(_tpot(rng, 20.0, 30), _tpot(rng, 20.0 / 1.01, 30), lower_is_better=True)
    assert vague is not None
    assert vague.verdict == "no difference detected"
    assert vague.more_needed is not None
    assert vague.resolvable is not None
    # With that many more, the interval's half-width (~1/sqrt(n)) would be down to the difference seen.
    half = (vague.high - vague.low) / 2
    assert half * (30 / (30 + vague.more_needed)) ** 0.5 <= vague.resolvable * 1.01
    assert vague.text().startswith("no difference detected: ±")
    assert judge([1.0] * 3, [1.0] * 3, lower_is_better=True) is None  # too few to claim anything
    assert spread([10.0, 10.0]) == 0.0


def test_a_planted_drift_is_flagged_and_a_steady_host_is_not() -> None:
    rng = np.random.default_rng(5)
    steady = [_tpot(rng, 20.0, 60) for _ in range(4)]
    drifting = [_tpot(rng, 20.0 * (1 + 0.03 * r), 60) for r in range(4)]  # 3% slower each round
    d = drift(drifting)
    assert d is not None
    assert d.flagged
    assert d.per_round == pytest.approx(0.03, abs=0.01)
    s = drift(steady)
    assert s is not None
    assert not s.flagged
    assert drift([[1.0, 2.0]]) is None


def test_figures_without_spread_are_not_judged() -> None:
    """Every request alike (a degenerate sample): no interval exists, and no NaN reaches the API."""
    assert judge([1.0] * 20, [1.0] * 20, lower_is_better=False) is None
    assert judge([1.0] * 5, [2.0] * 5, lower_is_better=False) is None  # too few


def _requests(rng: np.random.Generator, tok_s: float, n: int) -> tuple[list[float], list[float]]:
    """n requests of 16-256 tokens at `tok_s` (CV per request): (tokens, seconds), as the verdicts pair them."""
    tokens = rng.integers(16, 257, n).astype(float)
    return list(tokens), list(tokens / tok_s * np.array(_tpot(rng, 1.0, n)))


def test_the_throughput_rate_finds_3_percent_and_holds_its_false_positive_rate() -> None:
    """judge_rate (the sum of tokens over the sum of seconds, no rank test): a true 3% difference found in
    at least 80% of 40 experiments at the planned requests, and none said in at least 190 of 200."""
    rng = np.random.default_rng(5)
    n = requests_for(CV, 0.03, power=0.9)
    found = 0
    for i in range(40):
        j = judge_rate(_requests(rng, 50.0, n), _requests(rng, 50.0 * 1.03, n), seed=i)
        assert j is not None
        assert j.verdict != "slower"
        found += j.verdict == "faster"
    assert found >= 32
    verdicts = []
    for i in range(200):
        j = judge_rate(_requests(rng, 50.0, 120), _requests(rng, 50.0, 120), seed=i)
        assert j is not None
        verdicts.append(j.verdict)
    assert verdicts.count("no difference detected") >= 190, {v: verdicts.count(v) for v in set(verdicts)}


def test_a_sure_difference_under_one_percent_is_no_difference() -> None:
    """Two equal engines whose requests barely vary: a 0.3% difference is sure (the interval excludes 1)
    but is no difference to an operator: 'no difference detected: 1.00x [...], within ±1%'."""
    rng = np.random.default_rng(2)
    base = list(rng.normal(100.0, 0.1, 200))
    other = list(rng.normal(100.3, 0.1, 200))
    j = judge(base, other, lower_is_better=False)
    assert j is not None
    assert j.low > 1.0  # sure
    assert j.verdict == "no difference detected"
    assert j.text() == f"no difference detected: 1.00x [{j.low:.2f}, {j.high:.2f}], within ±1%"
