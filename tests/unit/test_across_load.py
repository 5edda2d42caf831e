"""Two profiles across load (issue 53): per-level intervals, the crossover and its uncertainty, against
the sandbox fake's batching model, whose crossover is known."""

from __future__ import annotations

import random

from daemon.experiments.across import capacity_ratio, crossover, level_ratio, summary

LOADS = [1.0, 2.0, 4.0, 8.0, 16.0]


def fake_throughput(c: float, *, spec: bool) -> float:
    """The fake engine's closed-loop throughput at concurrency c (knee 16, rate 100 tok/s): a step costs
    1 + c (1 + k) / 16; the speculative profile drafts k = 3 at 0.1 each and emits 2.2 tokens a step."""
    k, cost, tokens = (3, 0.1, 2.2) if spec else (0, 0.0, 1.0)
    return c * 100.0 * tokens / ((1 + cost * k) * (1 + c * (1 + k) / 16))


# Where they meet: 2.2 (1 + c/16) = 1.3 (1 + 4c/16), c = 0.9 / 0.1875.
KNOWN = 4.8


def rounds(c: float, spec: bool, n: int, rng: random.Random, noise: float = 0.03) -> list[float]:
    return [fake_throughput(c, spec=spec) * rng.lognormvariate(0, noise) for _ in range(n)]


def test_the_crossover_is_found_between_the_levels_around_it() -> None:
    rng = random.Random(7)  # noqa: S311 - simulated noise
    levels = [level_ratio(c, rounds(c, False, 3, rng), rounds(c, True, 3, rng)) for c in LOADS]
    cross = crossover(levels)
    assert cross is not None
    assert 4.0 <= cross.at <= 8.0  # within one level of the known 4.8
    assert cross.low is not None
    assert cross.high is not None
    assert cross.low < KNOWN < cross.high
    assert cross.faster_below
    text = summary("eagle", "concurrency", levels, cross)
    assert text.startswith(f"eagle faster up to ~{cross.at:.3g} concurrency [")
    assert ", slower above" in text
    assert levels[0].low is not None
    assert levels[0].low > 1.0  # decided faster at 1


def test_the_crossover_interval_covers_the_truth_at_about_its_level() -> None:
    """200 simulated experiments: the 99% interval holds the known crossover in nearly all of them."""
    rng = random.Random(11)  # noqa: S311 - simulated noise
    hits = crossed = 0
    for seed in range(200):
        levels = [level_ratio(c, rounds(c, False, 3, rng), rounds(c, True, 3, rng)) for c in LOADS]
        cross = crossover(levels, seed=seed)
        if cross is None or cross.low is None or cross.high is None:
            continue
        crossed += 1
        hits += cross.low <= KNOWN <= cross.high
    assert crossed == 200
    print(f"coverage {hits}/{crossed}")
    assert hits >= 180


def test_no_crossover_where_one_side_wins_everywhere() -> None:
    rng = random.Random(3)  # noqa: S311 - simulated noise
    levels = [level_ratio(c, rounds(c, False, 3, rng), rounds(c, False, 3, rng, 0.0)) for c in LOADS]
    faster = [level_ratio(c, [100.0, 101.0], [130.0, 131.0]) for c in LOADS]
    assert crossover(faster) is None
    assert summary("b", "concurrency", faster, None).startswith("b faster or even at every concurrency")
    assert level_ratio(1.0, [1.0], [2.0]).low is None  # one round: no interval
    assert levels


def test_the_capacity_ratio_with_rounds_or_from_the_brackets() -> None:
    with_rounds = capacity_ratio(
        [(10.0, 11.0), (10.4, 11.4), (9.8, 10.8)], [(9.0, 9.9), (9.3, 10.2), (9.1, 10.0)]
    )
    assert with_rounds.startswith("capacity under the SLO 0.91x [")
    assert with_rounds.endswith("(3 rounds)")
    one = capacity_ratio([(10.0, 11.0)], [(9.0, 9.9)])
    assert one == "capacity under the SLO 0.90x [0.82, 0.99] (the brackets)"
