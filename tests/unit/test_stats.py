"""The statistics behind an A/B verdict (#37), on synthetic per-request figures of known distributions:
a true 3% difference is found with the requests the planner asks for; at no difference the verdict is "no
difference detected" in at least 95% of 200 simulated experiments; a planted drift is flagged."""

from __future__ import annotations

import numpy as np
import pytest

from daemon.experiments.stats import drift, ratio_of_means, ratio_of_rates, requests_for, rounds_for, spread
from daemon.experiments.verdict_types import Judged, Verdict

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
        j = ratio_of_means(base, faster, lower_is_better=True, seed=i)
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
        j = ratio_of_means(_tpot(rng, 20.0, 120), _tpot(rng, 20.0, 120), lower_is_better=True, seed=i)
        assert j is not None
        verdicts.append(j.verdict)
    assert verdicts.count(Verdict.NO_DIFFERENCE) >= 190, {v: verdicts.count(v) for v in set(verdicts)}


def test_the_answer_says_the_interval_or_how_many_more_requests() -> None:
    rng = np.random.default_rng(11)
    clear = ratio_of_means(_tpot(rng, 20.0, 300), _tpot(rng, 18.0, 300), lower_is_better=True)
    assert clear is not None
    assert clear.verdict == "faster"
    assert clear.text().startswith("faster: 1.1")
    assert clear.low > 1.0
    thr = ratio_of_means([100.0 + x for x in range(10)], [90.0 + x for x in range(10)], lower_is_better=False)
    assert thr is not None
    assert thr.verdict == "slower"  # throughput: higher is better
    vague = ratio_of_means(_tpot(rng, 20.0, 30), _tpot(rng, 20.0 / 1.01, 30), lower_is_better=True)
    assert vague is not None
    assert vague.verdict == "no difference detected"
    assert vague.more_needed is not None
    assert vague.resolvable is not None
    # With that many more, the interval's half-width (~1/sqrt(n)) would be down to the difference seen.
    half = (vague.high - vague.low) / 2
    assert half * (30 / (30 + vague.more_needed)) ** 0.5 <= vague.resolvable * 1.01
    assert vague.text().startswith("no difference detected: ±")
    assert ratio_of_means([1.0] * 3, [1.0] * 3, lower_is_better=True) is None  # too few to claim anything
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
    assert ratio_of_means([1.0] * 20, [1.0] * 20, lower_is_better=False) is None
    assert ratio_of_means([1.0] * 5, [2.0] * 5, lower_is_better=False) is None  # too few


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
        j = ratio_of_rates(_requests(rng, 50.0, n), _requests(rng, 50.0 * 1.03, n), seed=i)
        assert j is not None
        assert j.verdict != "slower"
        found += j.verdict == "faster"
    assert found >= 32
    verdicts = []
    for i in range(200):
        j = ratio_of_rates(_requests(rng, 50.0, 120), _requests(rng, 50.0, 120), seed=i)
        assert j is not None
        verdicts.append(j.verdict)
    assert verdicts.count(Verdict.NO_DIFFERENCE) >= 190, {v: verdicts.count(v) for v in set(verdicts)}


def test_a_sure_difference_under_one_percent_is_no_difference() -> None:
    """Two equal engines whose requests barely vary: a 0.3% difference is sure (the interval excludes 1)
    but is no difference to an operator: 'no difference detected: 1.00x [...], within ±1%'."""
    rng = np.random.default_rng(2)
    base = list(rng.normal(100.0, 0.1, 200))
    other = list(rng.normal(100.3, 0.1, 200))
    j = ratio_of_means(base, other, lower_is_better=False)
    assert j is not None
    assert j.low > 1.0  # sure
    assert j.verdict == "no difference detected"
    assert j.text() == f"no difference detected: 1.00x [{j.low:.2f}, {j.high:.2f}], within ±1%"


ROUND_CV = 0.02  # what one round's requests share: the host's load that minute, the engine's state
PER_ROUND = 50


def _rounds(rng: np.random.Generator, mean_ms: float, k: int) -> list[float]:
    """k rounds of PER_ROUND requests; each round's figures scaled by its own shared factor."""
    return [
        x for _ in range(k) for x in _tpot(rng, mean_ms * float(np.exp(rng.normal(0.0, ROUND_CV))), PER_ROUND)
    ]


def test_intervals_over_rounds_hold_their_coverage_where_requests_alone_do_not() -> None:
    """200 A/A experiments of 4 rounds a side with a shared per-round effect (issue 49): the interval taken
    over the rounds contains 1.00 in at least 93% of them and says so (`scope`); the request-level interval
    of the same figures, resampling requests as if independent, is too narrow (this is the test's teeth)."""
    rng = np.random.default_rng(17)
    sizes = ([PER_ROUND] * 4, [PER_ROUND] * 4)
    by_rounds = by_requests = false_alarms = 0
    for i in range(200):
        a, b = _rounds(rng, 20.0, 4), _rounds(rng, 20.0, 4)
        j = ratio_of_means(a, b, lower_is_better=True, rounds=sizes, seed=i)
        naive = ratio_of_means(a, b, lower_is_better=True, seed=i)
        assert j is not None
        assert naive is not None
        assert (j.scope, j.rounds, j.samples, naive.scope) == ("rounds", (4, 4), (200, 200), "requests")
        by_rounds += j.low <= 1.0 <= j.high
        by_requests += naive.low <= 1.0 <= naive.high
        false_alarms += j.verdict != "no difference detected"
    assert by_rounds >= 186, by_rounds  # 93%
    assert by_requests < 170, by_requests  # ~77%: what the issue saw
    assert false_alarms <= 6  # the (1 - ALPHA) interval decides: ~1 in 100


def test_rates_over_rounds_hold_their_coverage() -> None:
    rng = np.random.default_rng(19)
    covered = 0
    for i in range(200):
        sides = []
        for _ in range(2):
            tokens = rng.integers(16, 257, 4 * PER_ROUND).astype(float)
            pace = np.array(_rounds(rng, 1.0, 4))
            sides.append((list(tokens), list(tokens / 50.0 * pace)))
        j = ratio_of_rates(sides[0], sides[1], rounds=([PER_ROUND] * 4, [PER_ROUND] * 4), seed=i)
        assert j is not None
        assert j.scope == "rounds"
        covered += j.low <= 1.0 <= j.high
    assert covered >= 186, covered


def test_a_true_3_percent_difference_is_found_with_the_planned_rounds() -> None:
    k = rounds_for(CV, ROUND_CV, PER_ROUND, 0.03)
    assert 10 <= k <= 40, k
    assert rounds_for(CV, 0.0, PER_ROUND, 0.03) < k  # no shared effect: fewer rounds
    rng = np.random.default_rng(23)
    found = 0
    for i in range(40):
        sizes = ([PER_ROUND] * k, [PER_ROUND] * k)
        j = ratio_of_means(
            _rounds(rng, 20.0, k), _rounds(rng, 20.0 / 1.03, k), lower_is_better=True, rounds=sizes, seed=i
        )
        assert j is not None
        assert j.verdict != "slower"
        found += j.verdict == "faster"
    assert found >= 32  # planned for 90% power


def test_one_round_a_side_is_judged_from_the_requests_and_says_so() -> None:
    rng = np.random.default_rng(29)
    a, b = _rounds(rng, 20.0, 1), _rounds(rng, 20.0, 3)
    j = ratio_of_means(a, b, lower_is_better=True, rounds=([PER_ROUND], [PER_ROUND] * 3))
    assert j is not None
    assert j.scope == "requests"
    assert j.p_value is not None


def _judged(low: float, high: float, more: int) -> Judged:
    return Judged((low + high) / 2, low, high, 0.5, 0.0, Verdict.NO_DIFFERENCE, (50, 50), more, 0.01)


def test_within_one_percent_is_said_only_when_the_whole_interval_is() -> None:
    """Issue 49: 'within ±1%' was printed for [1.0027, 1.0125] (no more requests needed)."""
    assert _judged(1.0027, 1.0125, 0).text() == "no difference detected: 1.01x [1.00, 1.01]"
    assert _judged(0.99, 1.01, 0).text().endswith(", within ±1%")
    assert _judged(0.9899, 1.006, 0).text() == "no difference detected: 1.00x [0.99, 1.01]"
    assert _judged(0.995, 1.0101, 0).text() == "no difference detected: 1.00x [0.99, 1.01]"
    assert _judged(0.995, 1.005, 12).text().endswith(", within ±1%")
    assert _judged(0.95, 1.05, 12).text() == "no difference detected: ±1.0% would need ~12 more requests"
