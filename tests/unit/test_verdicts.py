"""The comparison's verdicts from per-request figures (#37): request rows as stored become per-request
figures; a profile truly 10% faster is judged faster with an interval around 1.10, one alike is 'no
difference detected' with the requests it would take, a drift of the baseline over its rounds is noted."""

from __future__ import annotations

import re

import numpy as np
import pytest

from daemon.core.jsontypes import RequestRow
from daemon.experiments.compare import Comparison, Row
from daemon.experiments.per_request import ONE_ROUND, Memo, Samples, judge_rows, samples_of, verdict_lines


def _row(profile: str, run_ids: list[int]) -> Row:
    return Row(profile, run_ids, len(run_ids), 100.0, None, None, None, None, None, False, [], {}, {})


def _samples(rng: np.random.Generator, mean: float, n: int, drift: float = 0.0) -> Samples:
    """n requests of 64 tokens at `mean` tokens/s (10% spread a request), as samples_of gives them."""
    thr = rng.normal(mean, 0.1 * mean, n) * (1 + drift)
    seconds = (64 / thr).tolist()
    return {"throughput": thr.tolist(), "tokens": [64.0] * n, "seconds": seconds, "e2el": seconds}


def test_request_rows_become_per_request_figures_and_failures_count_in_none() -> None:
    rows: list[RequestRow] = [
        {"status": "ok", "ttft": 0.1, "e2el": 1.1, "out": 11, "gaps": [0.1] * 10},
        {"status": "ok", "ttft": 0.2, "e2el": 0.2, "out": 1, "gaps": []},
        {"status": "http", "ttft": None, "e2el": None, "out": 0, "gaps": []},
    ]
    s = samples_of(rows)
    assert s["throughput"] == [10.0, 5.0]
    assert s["tokens"] == [11.0, 1.0]
    assert s["seconds"] == [1.1, 0.2]
    assert s["ttft"] == [0.1, 0.2]
    assert s["e2el"] == [1.1, 0.2]
    assert s["tpot"] == pytest.approx([0.1])  # (e2el - ttft) / (out - 1): a one-token request has none
    assert s["itl"] == pytest.approx([0.1])


def test_a_true_difference_is_judged_with_its_interval_and_a_like_one_is_not() -> None:
    rng = np.random.default_rng(7)
    by_run = {1: _samples(rng, 50, 200), 2: _samples(rng, 55, 200), 3: _samples(rng, 50, 200)}
    c = Comparison(
        "base", None, None, None, "m", rows=[_row("base", [1]), _row("fast", [2]), _row("same", [3])]
    )
    judge_rows(c, by_run)
    base, fast, same = c.rows
    assert base.verdict is None
    assert not base.judged
    assert fast.verdict == "faster"
    j = fast.judged["throughput"]
    assert 1.0 < j.low < 1.10 < j.high, j
    assert re.fullmatch(r"faster: 1\.\d\dx \[1\.\d\d, 1\.\d\d\]", fast.verdict_text or "")
    assert fast.judged["e2el"].verdict == "faster"  # a lower latency is better: the same direction
    assert same.verdict == "no difference detected"
    assert re.fullmatch(
        r"no difference detected: ±\d+\.\d% would need ~\d+ more requests", same.verdict_text or ""
    )
    lines = verdict_lines(c)
    assert lines[0].startswith("fast: faster: ")
    assert lines[1].startswith("same: no difference detected")


def test_throughput_is_judged_as_the_aggregate_weighs_it() -> None:
    """A mix of short fast and long slow requests: the profile halves the long ones' time and slows the short
    ones by 10%. Per-request rates average to about the same, the aggregate (tokens over seconds) is ~1.95x:
    the verdict follows the aggregate."""
    rng = np.random.default_rng(5)

    def mix(long_s: float, short_s: float) -> Samples:
        tokens = [1000.0] * 50 + [10.0] * 150
        seconds = list(rng.normal(long_s, 0.02 * long_s, 50)) + list(rng.normal(short_s, 0.02 * short_s, 150))
        return {
            "tokens": tokens,
            "seconds": seconds,
            "throughput": [t / s for t, s in zip(tokens, seconds, strict=True)],
        }

    c = Comparison("base", None, None, None, "m", rows=[_row("base", [1]), _row("b", [2])])
    judge_rows(c, {1: mix(20.0, 0.1), 2: mix(10.0, 0.11)})
    j = c.rows[1].judged["throughput"]
    assert 1.9 < j.ratio < 2.0, j
    assert j.p_value is None  # judged by its interval
    assert c.rows[1].verdict == "faster"


def test_a_drift_of_the_baseline_over_its_rounds_is_noted() -> None:
    rng = np.random.default_rng(3)
    rounds = {i: _samples(rng, 50, 60, drift=0.04 * i) for i in range(1, 5)}  # 4% a round
    other = {10 + i: _samples(rng, 50, 60, drift=0.04 * i) for i in range(1, 5)}
    c = Comparison(
        "base", None, None, None, "m", rows=[_row("base", [1, 2, 3, 4]), _row("b", [11, 12, 13, 14])]
    )
    judge_rows(c, rounds | other)
    drift = [n for n in c.notes if n.startswith("drift:")]
    assert drift
    assert "base's own per-request throughput moved +" in drift[0]
    assert "over 4 rounds" in drift[0]
    steady = {i: _samples(rng, 50, 60) for i in range(1, 5)}
    c = Comparison(
        "base", None, None, None, "m", rows=[_row("base", [1, 2, 3, 4]), _row("b", [11, 12, 13, 14])]
    )
    judge_rows(c, steady | other)
    assert not [n for n in c.notes if n.startswith("drift:")]


def test_the_same_benchmarks_are_judged_once() -> None:
    rng = np.random.default_rng(11)
    by_run = {1: _samples(rng, 50, 100), 2: _samples(rng, 60, 100)}
    memo: Memo = {}

    def fresh() -> Comparison:
        return Comparison("base", None, None, None, "m", rows=[_row("base", [1]), _row("b", [2])])

    first = fresh()
    judge_rows(first, by_run, memo)
    assert list(memo) == [((1,), (2,))]
    again = fresh()
    judge_rows(again, {}, memo)  # no figures read: the kept judgement
    assert again.rows[1].verdict_text == first.rows[1].verdict_text
    assert (first.rows[1].verdict or "") == "faster"


def test_rounds_are_judged_over_rounds_and_one_round_says_what_its_interval_covers() -> None:
    """Issue 49: a profile measured in rounds is judged over its rounds (each round its own conditions);
    measured in one, its interval covers request-to-request noise only, and the comparison says so."""
    rng = np.random.default_rng(3)
    by_run = {i: _samples(rng, 50 * (1 + 0.02 * (i % 3)), 40) for i in range(1, 9)}
    rounds = [_row("base", [1, 3, 5, 7]), _row("b", [2, 4, 6, 8])]
    rounds[0].rounds, rounds[1].rounds = [[1], [3], [5], [7]], [[2], [4], [6], [8]]
    c = Comparison("base", None, None, None, "m", rows=rounds)
    judge_rows(c, by_run)
    j = c.rows[1].judged["throughput"]
    assert (j.scope, j.rounds, j.samples) == ("rounds", (4, 4), (160, 160))
    assert ONE_ROUND not in c.notes
    one = Comparison("base", None, None, None, "m", rows=[_row("base", [1, 3]), _row("b", [2, 4])])
    judge_rows(one, by_run)
    assert one.rows[1].judged["throughput"].scope == "requests"
    assert ONE_ROUND in one.notes
