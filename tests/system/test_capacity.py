"""Capacity under an SLO and two profiles across load (issue 53), against fake engines that batch: a decode
step takes 1 + running x (1 + drafts) / knee times an empty engine's, so latency grows with load and a
speculative profile's verify step fills the batch sooner.

- batchy (50 tok/s, knee 4, 16 tokens a request): mean TPOT = 1 / (50 (1 - 16 x / (50 x 4))) at x req/s
  (Little's law), so its capacity under tpot_mean_ms=50 is 4 x 1.5 / (16 x 0.05) = 7.5 req/s.
- queuey (the same, at most 2 requests running): it serves 2 x 50 / (16 x 1.5) = 4.2 req/s; past that its
  queue grows without bound while each running request's TPOT (30 ms) stays within the SLO.
- flat (100 tok/s, knee 16) against flat-eagle (3 drafts at 0.4 each: 2.2 tokens a step, a draft costs
  0.1 of a step): eagle's throughput over flat's is E (1 + c/16) / (1.3 (1 + 4c/16)) for E tokens a step
  (2.2 when no request's last step is cut short), 1 at c = 16 (E - 1.3) / (5.2 - E)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from k25_sandbox.fake_stats import Draw
from tests.sandboxing import Api, with_profiles
from tests.system.test_api_cli import _cli

KNOWN_CAPACITY = 7.5
SERVES = 2 * 50 / (16 * 1.5)
LEVELS = [1, 2, 4, 8, 16]
SEARCH = {"num_prompts": 30, "max_tokens": 16, "warmups": 1, "slo": "tpot_mean_ms=50"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    profiles: dict[str, dict[str, Any]] = {
        "batchy": {"rate": 50.0, "engine_args": ("--batch-knee", "4")},
        "queuey": {"rate": 50.0, "engine_args": ("--batch-knee", "4", "--max-running", "2")},
        "flat": {"rate": 100.0, "engine_args": ("--batch-knee", "16")},
        "flat-eagle": {
            "rate": 100.0,
            "spec": {"k": 3, "acceptance": 0.4},
            "engine_args": ("--batch-knee", "16", "--draft-cost", "0.1"),
        },
    }
    with with_profiles(
        tmp_path_factory.mktemp("capacity-profiles"),
        {n: kw | {"flavor": "vllm"} for n, kw in profiles.items()},
    ) as api:
        yield api


def _steps_for(n: int, *, k: int, acceptance: float) -> int:
    """The decode steps the fake engine takes for n tokens with k drafts at `acceptance`."""
    draw, produced, steps = Draw(acceptance), 0, 0
    while produced < n:
        produced += min(n - produced, 1 + draw.accepted(k))
        steps += 1
    return steps


def _bench(api: Api, body: dict[str, Any]) -> Any:
    r = api.client.post("/benchmarks", json=body)
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    api.wait_run(run_id, within_s=240)
    return api.client.get(f"/benchmarks/{run_id}").json()


def _steps(b: Any) -> list[tuple[float, bool]]:
    return [(lv["request_rate"], lv["summary"]["slo_met"]) for lv in b["levels"]]


def test_the_capacity_search_finds_the_known_capacity(api: Api) -> None:
    api.activate("batchy")
    resolution = 0.2
    b = _bench(api, SEARCH | {"capacity": {"start_rate": 4.0, "resolution": resolution}})
    found = b["capacity"]
    print(found["text"], _steps(b))
    assert b["outcome"] == "ok", b
    assert found["reason"] == "bracketed to 20%"
    low, high = found["capacity"], found["lowest_missed"]
    assert high <= low * (1 + resolution) + 1e-9
    # The bracket lies within the resolution of the known capacity.
    assert low <= KNOWN_CAPACITY * (1 + resolution)
    assert high >= KNOWN_CAPACITY / (1 + resolution)
    assert found["limiting"] == "mean_tpot_ms"
    proven = 0.0
    for rate, met in _steps(b):  # each step a stored level; none above the proven rate x the factor
        assert proven == 0.0 or rate <= 2.0 * proven + 1e-9
        proven = max(proven, rate) if met else proven


def test_an_over_saturated_engine_stops_the_search_with_the_reason(api: Api) -> None:
    api.activate("queuey")
    b = _bench(api, SEARCH | {"capacity": {"start_rate": 3.0, "resolution": 0.1}})
    found = b["capacity"]
    print(found["text"], _steps(b))
    assert "over-saturated at" in found["reason"]
    assert "queue grew" in found["reason"]
    assert found["limiting"] == "saturation"
    steps = _steps(b)
    assert steps[-1][0] > SERVES  # it stopped at the first step past what the engine serves
    assert found["capacity"] is not None
    assert found["capacity"] < SERVES
    assert all(rate <= 2.0 * found["capacity"] + 1e-9 for rate, _ in steps)


def test_an_experiment_across_levels_finds_the_known_crossover(api: Api, tmp_path: Path) -> None:
    body = {
        "profiles": ["flat", "flat-eagle"],
        "benchmark": {"concurrency": LEVELS, "num_prompts": 16, "max_tokens": 12, "warmups": 1},
        "rounds": 2,
    }
    r = api.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    api.wait_run(run_id, within_s=300)
    verdicts = api.client.get(f"/experiments/{run_id}").json()["verdicts"]
    print(verdicts)
    # The crossover of the fake's model at the tokens a step it really emits: a request's last step is cut
    # short by max_tokens (6 steps for 12 tokens: 2.0 a step, not 2.2), as the fake's own drafts say.
    tokens = 12 / _steps_for(12, k=3, acceptance=0.4)
    known = 16 * (tokens - 1.3) / (1.3 * 4 - tokens)
    line = next(v for v in verdicts if v.startswith("flat-eagle faster up to ~"))
    m = re.match(r"flat-eagle faster up to ~([\d.]+) concurrency", line)
    assert m is not None, line
    print(f"known crossover {known:.2f} ({tokens:.3f} tokens a step), found {m[1]}")
    # Within one level of the known crossover: the levels double, so at most a factor of 2 either way (a
    # busy CI machine read 4.03 for 3.50: the level above, 4, by a hair).
    assert known / 2 <= float(m[1]) <= known * 2
    assert ", slower above" in line

    # The Pareto view of the same benchmarks: the table in the terminal, the chart as an SVG file.
    svg = tmp_path / "pareto.svg"
    out = _cli(api.info, "compare", "--baseline", "flat", "--pareto", "--plot", str(svg))
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith(("flat ", "flat-eagle "))]
    assert len([r for r in rows if r.split()[1].startswith("c=")]) == 2 * len(LEVELS), out.stdout
    assert any(r.endswith(" *") for r in rows)  # the Pareto front is starred
    tree = ElementTree.parse(svg)  # noqa: S314 - the file the CLI just wrote
    ns = "{http://www.w3.org/2000/svg}"
    assert tree.getroot().tag == f"{ns}svg"
    texts = [el.text for el in tree.iter(f"{ns}text")]
    assert {"output tok/s", "TPOT p95 (ms)", "flat", "flat-eagle"} <= set(texts), texts  # axes, legend
    assert texts.count("c=16") == 2  # each profile's points, labelled with their level
    ids = {el.get("id", "") for el in tree.iter()}
    assert {"legend_1", "xtick_1", "ytick_1"} <= ids
