"""Interleaved rounds (#37): the orders an experiment measures its profiles in, and what they cost in
switches; the request's rules for rounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from daemon.experiments.request import ExperimentRequest
from daemon.experiments.rounds import orders, switches


def test_two_profiles_alternate_abba_and_a_round_costs_one_switch() -> None:
    plan = orders(["a", "b"], 4, seed=1)
    assert plan == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]
    # Each profile is measured first in half the rounds: a drift falls on both alike.
    assert sum(o[0] == "a" for o in plan) == sum(o[0] == "b" for o in plan) == 2
    assert switches(plan, "a") == 4  # a b | b a | a b | b a: the ends of rounds meet
    assert switches(plan, "other") == 5
    assert switches(orders(["a", "b"], 1, seed=1), "a") == 1


def test_three_profiles_take_a_random_order_a_round_repeatable_by_its_seed() -> None:
    plan = orders(["a", "b", "c"], 6, seed=42)
    assert plan[0] == ["a", "b", "c"]  # the first round as asked
    assert all(sorted(o) == ["a", "b", "c"] for o in plan)  # a block: each profile once a round
    assert len({tuple(o) for o in plan}) > 1  # the order changes between rounds
    assert orders(["a", "b", "c"], 6, seed=42) == plan
    assert orders(["a", "b", "c"], 6, seed=43) != plan
    assert orders(["a"], 3, seed=1) == [["a"], ["a"], ["a"]]


def test_rounds_are_bounded_and_not_for_a_sweep() -> None:
    assert ExperimentRequest.model_validate({"profiles": ["a", "b"], "rounds": 4}).rounds == 4
    for bad in (0, 21):
        with pytest.raises(ValidationError):
            ExperimentRequest.model_validate({"profiles": ["a", "b"], "rounds": bad})
    with pytest.raises(ValidationError, match="a sweep measures its variants once each"):
        ExperimentRequest.model_validate({"profiles": ["a"], "vary": {"max_num_seqs": [8, 16]}, "rounds": 2})
