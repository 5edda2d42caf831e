"""The simulation's regression traces (tests/system/sim_traces/*.json): each a failing walk found by a seed,
shrunk by `perf/simulate.py --shrink NAME` to its shortest failing prefix and fewest steps, and replayed
here on a fresh world: it failed on the defect and must pass on the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf.sim.walk import load_trace, simulate

TRACES = sorted((Path(__file__).parent / "sim_traces").glob("*.json"))


# The walk has timings: on its defect the first trace failed on 6 replays of 7 (closing note, 2026-12-07);
# each replay boots a world of its own (a sandbox: seconds of CPU), so CI replays each once.
REPLAYS = 1


@pytest.mark.parametrize("trace", TRACES, ids=[t.stem for t in TRACES])
def test_a_shrunk_trace_passes(trace: Path) -> None:
    for _ in range(REPLAYS):
        result = simulate(load_trace(trace))
        assert result.failed_at is None, f"{trace.name} fails again:\n{result.trace()}"
