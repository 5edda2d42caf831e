"""Issue 53: early stop under repeated looks (daemon/experiments/sequential.py). In 200 simulated A/A
experiments that look after every round, the error stays at the nominal level; a true 5% difference is
decided in fewer rounds than the fixed design needs for it."""

from __future__ import annotations

import math
import random

from daemon.experiments.sequential import look, look_alpha, spent, stop
from daemon.experiments.stats import ALPHA, rounds_for

ROUND_SD = 0.03  # log-scale spread of one round's figure (the host's shared conditions)


def _run(rng: random.Random, effect: float, planned: int) -> tuple[int, bool]:
    """Rounds until stop, and whether a difference was declared."""
    a: list[float] = []
    b: list[float] = []
    for r in range(1, planned + 1):
        a.append(100.0 * math.exp(rng.gauss(0, ROUND_SD)))
        b.append(100.0 * (1 + effect) * math.exp(rng.gauss(0, ROUND_SD)))
        lk = look(a, b, planned)
        if lk.different:
            return r, True
        if stop([lk], r, planned):
            return r, False
    return planned, False


def test_spending_releases_all_of_alpha_over_the_planned_looks_and_little_early() -> None:
    assert spent(1.0) == __import__("pytest").approx(ALPHA)
    levels = [look_alpha(k, 10) for k in range(2, 11)]
    assert math.isclose(sum(levels), ALPHA, rel_tol=1e-9)
    assert levels[0] < 1e-6 < levels[-1]  # O'Brien-Fleming: strict at first


def test_repeated_looks_keep_the_error_at_the_nominal_level() -> None:
    rng = random.Random(7)  # noqa: S311 (a simulation)
    false = sum(_run(rng, 0.0, 10)[1] for _ in range(200))
    assert false <= 6, false  # nominal 1% of 200: 2 expected; > 6 has probability < 0.5%


def test_a_true_5_percent_difference_is_decided_sooner_than_the_fixed_design() -> None:
    rng = random.Random(11)  # noqa: S311 (a simulation)
    fixed = rounds_for(0.0, ROUND_SD, 1, 0.05)  # the fixed design's rounds for this difference
    planned = math.ceil(1.2 * fixed)  # a group-sequential plan's usual inflation of the most rounds
    runs = [_run(rng, 0.05, planned) for _ in range(200)]
    decided = [r for r, different in runs if different]
    assert len(decided) >= 170, len(decided)  # found (power about 0.9)
    mean = sum(r for r, _ in runs) / len(runs)
    assert mean < fixed, (mean, fixed)
    print(
        f"5% difference: fixed design {fixed} rounds; sequential mean {mean:.1f} (planned at most {planned})"
    )
    plain = look([100, 101, 99, 100, 102, 98], [110, 111, 109, 110, 112, 108], 10)
    assert (stop([plain], 6, 10) or "").startswith("decided after 6 of 10 rounds: 1.100x")
    assert stop([look([100, 101, 99], [110, 111, 109], 10)], 3, 10) is None  # too early to spend much
