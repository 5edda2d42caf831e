"""Acceptance per category's interval (issue 53): the ratio estimator over requests or windows."""

from __future__ import annotations

import random

from daemon.measure.acceptance import Unit, _windows, interval


def test_the_ratio_estimator_and_its_interval_cover_the_true_length() -> None:
    """Requests of 20-60 tokens at a true 2.5 tokens a step, the steps noisy: the 95% interval holds 2.5 in
    about 95 of 100 simulated categories."""
    rng = random.Random(5)  # noqa: S311 - simulated noise
    hits = 0
    for _ in range(200):
        units = []
        for _ in range(12):
            tokens = rng.randint(20, 60)
            units.append(Unit(tokens, max(1.0, tokens / 2.5 * rng.lognormvariate(0, 0.15))))
        length, low, high = interval(units)
        assert length is not None
        assert low is not None
        assert high is not None
        assert low < length < high
        hits += low <= 2.5 <= high
    assert 180 <= hits <= 200, hits


def test_too_few_units_give_no_interval_and_windows_keep_two_requests_each() -> None:
    assert interval([]) == (None, None, None)
    assert interval([Unit(30, 10)]) == (3.0, None, None)
    assert _windows(list(range(9))) == [[0, 4, 8], [1, 5], [2, 6], [3, 7]]
    assert _windows(list(range(5))) == [[0, 2, 4], [1, 3]]
    assert _windows([7]) == [[7]]
