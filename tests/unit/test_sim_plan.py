"""The simulation's pure parts (perf/sim/): a seed is one walk, the CI seeds draw every kind of step, a
trace survives its file, and the shrinker finds the shortest failing trace (here against a stand-in for
the world: a trace fails when a teardown comes after an activate, as the planted defects need)."""

from __future__ import annotations

from pathlib import Path

from perf.sim.shrink import shrink
from perf.sim.steps import WEIGHTS, Step, plan
from perf.sim.walk import load_trace, save_trace
from perf.sim.world import FAULTY
from tests.system.test_simulation import CI_SEEDS, STEPS


def test_a_seed_is_one_walk_and_another_seed_another() -> None:
    assert plan(3, 40) == plan(3, 40)
    assert plan(3, 40) != plan(4, 40)
    assert plan(3, 40)[:10] == plan(3, 10)  # a longer run of a seed begins with the shorter one


def test_the_ci_seeds_draw_every_kind_of_step() -> None:
    drawn = [s for seed in CI_SEEDS for s in plan(seed, STEPS)]
    kinds = {s.kind for s in drawn}
    assert set(WEIGHTS) - {"activate_faulty"} <= kinds, set(WEIGHTS) - kinds
    assert any(s.kind == "activate" and s.args["profile"] in FAULTY for s in drawn)  # activate_faulty's
    assert any(s.kind == "engine_hang" and s.args["for_s"] is None for s in drawn)  # a hang that lasts


def test_a_trace_survives_its_file(tmp_path: Path) -> None:
    steps = plan(5, 12)
    save_trace(tmp_path / "t.json", steps, why="x", seed=5)
    assert load_trace(tmp_path / "t.json") == steps


def _fails(steps: list[Step]) -> frozenset[str] | None:
    """Fails ([one-job]) when a teardown follows an activate of alpha, however far apart."""
    seen = False
    for s in steps:
        seen = seen or (s.kind == "activate" and s.args.get("profile") == "alpha")
        if seen and s.kind == "teardown":
            return frozenset({"one-job"})
    return None


def test_the_shrinker_keeps_the_two_steps_that_fail() -> None:
    noise = [Step("bench"), Step("warm", {"profile": "beta"}), Step("engine_crash")]
    steps = [*noise * 3, Step("activate", {"profile": "alpha"}), *noise * 4, Step("teardown"), *noise * 5]
    failed_at = steps.index(Step("teardown"))
    calls: list[int] = []

    def run(candidate: list[Step]) -> frozenset[str] | None:
        calls.append(len(candidate))
        return _fails(candidate)

    short = shrink(steps, failed_at, frozenset({"one-job"}), run, attempts=1)
    assert short == [Step("activate", {"profile": "alpha"}), Step("teardown")]
    assert max(calls) <= failed_at  # never past the step that failed (the prefix comes first)


def test_a_candidate_that_fails_another_way_is_not_taken() -> None:
    steps = [Step("activate", {"profile": "alpha"}), Step("bench"), Step("teardown")]
    short = shrink(steps, 2, frozenset({"runs"}), lambda c: _fails(c), attempts=1)
    assert short == steps
