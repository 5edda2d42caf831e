"""Capacity under an SLO and two profiles across load, against fake engines that batch: a decode step takes
1 + running x (1 + drafts) / knee times an empty engine's, so latency grows with load and a speculative
profile's verify step fills the batch sooner.

- batchy (100 tok/s, knee 4, 16 tokens a request): mean TPOT = 1 / (100 - 4 x) at x req/s (Little's law,
  mean field), so its capacity under tpot_mean_ms=50 is (100 - 20) / 4 = 20 req/s. Fast, so that a step
  of 120 steady-state requests takes seconds.
- queuey (the same, at most 2 requests running): it serves at most 2 x 100 / (16 x 1.5) = 8.3 req/s (less:
  each request's own overhead); past that its queue grows without bound while each running request's TPOT
  (15 ms) stays within the SLO.
- flat (100 tok/s, knee 16) against flat-eagle (3 drafts at 0.4 each: 2.2 tokens a step, a draft costs
  0.1 of a step): eagle's throughput over flat's is E (1 + c/16) / (1.3 (1 + 4c/16)) for E tokens a step
  (2.2 when no request's last step is cut short), 1 at c = 16 (E - 1.3) / (5.2 - E)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from daemon.measure.capacity_step import KEEPING_UP
from k25_sandbox.fake_stats import Draw
from tests.sandboxing import Api, inside, with_profiles
from tests.system.test_api_cli import _cli

KNOWN_CAPACITY = 20.0
SERVES = 2 * 100 / (16 * 1.5)
LEVELS = [1, 2, 4, 8, 16]
REQUESTS = 40
SEARCH = {"num_prompts": REQUESTS, "max_tokens": 16, "warmups": 1, "slo": "tpot_mean_ms=50"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    profiles: dict[str, dict[str, Any]] = {
        "batchy": {"rate": 100.0, "engine_args": ("--batch-knee", "4")},
        "queuey": {"rate": 100.0, "engine_args": ("--batch-knee", "4", "--max-running", "2")},
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
    got = api.client.get(f"/benchmarks/{run_id}")
    if got.status_code != 200:
        journal = inside(api.info, "journalctl", "-u", "k25-ctl", "-n", "60", "--no-pager").stdout
        raise AssertionError(f"GET /benchmarks/{run_id}: {got.status_code}\n{journal}")
    return got.json()


def _steps(b: Any) -> list[tuple[float, bool]]:
    keys = (
        "slo_decision",
        "warmup_requests",
        "completed",
        "steady_throughput",
        "queue_growth",
        "queue_growth_s",
    )
    return [(lv["request_rate"], *(lv["summary"].get(k) for k in keys)) for lv in b["levels"]]


def test_the_capacity_search_finds_the_known_capacity(api: Api) -> None:
    """Each step an open stream measured in its steady state (a warm-up left out, arrivals kept up until
    the measured requests ended), extended while its interval holds the bound, and stored with its decision
    and interval; the answer's bracket holds the known capacity and its estimate lies near it (the
    statistics are proven against known physics in tests/unit/test_capacity_physics.py)."""
    api.activate("batchy")
    cfg = {"start_rate": 10.0, "resolution": 0.2, "extend": 3, "max_steps": 5}
    b = _bench(api, SEARCH | {"capacity": cfg})
    found = b["capacity"]
    assert found is not None, {k: b.get(k) for k in ("outcome", "error", "detail")}
    print(found["text"], _steps(b))
    assert b["outcome"] == "ok", b
    assert found["reason"].startswith(("bracketed to 20%", "the step limit (5)")), found["reason"]
    low, high = found["capacity"], found["lowest_missed"]
    assert low <= KNOWN_CAPACITY <= (high or math.inf)
    assert found["estimate"] is not None
    assert abs(found["estimate"] / KNOWN_CAPACITY - 1) <= 0.2
    assert found["limiting"] == "mean_tpot_ms"
    proven = 0.0
    for lv in b["levels"]:  # each step a stored level; none above the proven rate x the factor
        rate, summary = lv["request_rate"], lv["summary"]
        assert proven == 0.0 or rate <= 2.0 * proven + 1e-9
        assert summary["slo_decision"] in {"met", "missed", "undecided"}
        assert summary["warmup_requests"] >= 5
        assert REQUESTS <= summary["completed"] <= 3 * REQUESTS
        low_ms, high_ms = summary["slo_intervals"]["mean_tpot_ms"]
        assert low_ms <= summary["mean_tpot_ms"] <= high_ms
        within = summary["slo_decision"] == "met" or summary["mean_tpot_ms"] <= 50  # undecided, read within
        proven = max(proven, rate) if within else proven


def test_an_over_saturated_engine_is_bisected_below_the_queue(api: Api) -> None:
    """Past what it serves the queue grows while TPOT stays within the SLO: the search goes on below the
    first step that shows it, never above, and says saturation bounded it."""
    api.activate("queuey")
    spec = SEARCH | {"num_prompts": 30, "capacity": {"start_rate": 6.0, "resolution": 0.1, "extend": 1}}
    b = _bench(api, spec)
    found = b["capacity"]
    assert found is not None, {k: b.get(k) for k in ("outcome", "error", "detail")}
    print(found["text"], _steps(b))
    assert "over-saturated at" in found["reason"]
    assert "queue grew" in found["reason"]
    assert found["limiting"] == "saturation"
    over: list[float] = []
    for lv in b["levels"]:
        assert all(lv["request_rate"] < rate for rate in over)  # never above a rate that showed the queue
        if lv["summary"]["over_saturated"]:
            over.append(lv["request_rate"])
    assert over, _steps(b)
    low, high = found["capacity"], found["lowest_missed"]
    assert low is not None
    assert high is not None
    assert high <= low * 1.1 + 1e-9  # bisected to the resolution, not stopped at the first queue
    # What the engine served while its queue grew (at most SERVES, which leaves out each request's own
    # overhead): the answer lies within the resolution below it, at most the detector's tolerance above
    # (a rate a few percent past what it serves grows a queue too slowly for a step of 30 requests to
    # show: 8.49 req/s against 8.33 was met beside the whole suite on 2 cores).
    # What it served is measured at the queue's rates, beside the suite: it reads below SERVES when the
    # machine is busiest (7.6 against 8.33), so the upper bound is the engine's own capacity or what it
    # served, whichever is more.
    served = min(lv["summary"]["steady_throughput"] for lv in b["levels"] if lv["request_rate"] in over)
    assert served <= SERVES * 1.05, served
    assert served / 1.1 <= low <= max(served, SERVES) / KEEPING_UP, (served, low)


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
