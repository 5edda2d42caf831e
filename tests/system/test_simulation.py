"""The seeded simulation's CI part (perf/sim/, issue 70): fixed seeds of 50 steps, each a walk on a world of
its own (the real daemon in a sandbox with quick fake engines), every invariant checked after every step.
A failure prints its seed and trace; `python perf/simulate.py --seed S --steps 50` replays it, and
`--shrink NAME` cuts it to a regression trace (tests/system/sim_traces/, replayed by
test_sim_regressions.py). The long run is `perf/simulate.py --steps 2000`."""

from __future__ import annotations

import pytest

from perf.sim.steps import plan
from perf.sim.walk import simulate

STEPS = 50
# Chosen once and kept: together they draw every kind of step (tests/unit/test_sim_plan.py checks that).
CI_SEEDS = (3,)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_seeded_walk_keeps_every_invariant_after_every_step(seed: int) -> None:
    result = simulate(plan(seed, STEPS))
    print(f"seed {seed}:\n{result.trace()}")
    assert result.failed_at is None, f"seed {seed} failed at step {result.failed_at}:\n{result.trace()}"
    assert result.checks == STEPS
