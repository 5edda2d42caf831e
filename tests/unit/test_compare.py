"""The comparison: like with like only (spec, prompts, GPUs), repeats as noise, verdicts."""

from __future__ import annotations

import itertools

import pytest

from daemon.experiments.compare import Measured, compare
from daemon.experiments.metric_judge import ASSUMED_NOISE

_ids = itertools.count(100, -1)  # newest first: ids fall as the list goes on


def m(profile: str, thr: float, *, spec: str = "s1", gpus: str = "8x H200", exp: int | None = None,
      prompts: str = "p1", length: float | None = None) -> Measured:  # fmt: skip
    summary = {"output_throughput": thr, "max_concurrency": 1, "request_rate": "inf", "acceptance_length": length,
               "mean_ttft_ms": 20.0, "median_tpot_ms": 1000 / thr}  # fmt: skip
    return Measured(next(_ids), profile, spec, prompts, gpus, exp, [summary], {"engine": "vllm"})


def test_repeats_give_the_noise_and_the_verdicts() -> None:
    rows = [
        m("fast", 150.0, exp=1), m("fast", 148.0, exp=1),
        m("slow", 55.0, exp=1, length=1.45), m("slow", 54.0, exp=1, length=1.45),
        m("same", 83.0, exp=1), m("same", 81.5, exp=1),
        m("baseline", 82.0, exp=1), m("baseline", 83.0, exp=1),
    ]  # fmt: skip
    c = compare(rows, baseline="baseline")
    by = {r.profile: r for r in c.rows}
    assert next(r.profile for r in c.rows) == "baseline"
    assert by["baseline"].verdict == "baseline"
    assert by["baseline"].speedup == 1.0
    assert (by["fast"].verdict, by["slow"].verdict, by["same"].verdict) == (
        "faster",
        "slower",
        "within noise",
    )
    assert by["fast"].speedup == pytest.approx(149.0 / 82.5)
    assert by["slow"].repeats == 2
    assert by["slow"].acceptance_length == 1.45
    assert not by["fast"].noise_assumed
    assert (by["fast"].noise or 1.0) < ASSUMED_NOISE
    assert c.notes == []


def test_single_runs_assume_noise_and_say_so() -> None:
    c = compare([m("a", 84.0), m("baseline", 82.0)], baseline="baseline")
    a = next(r for r in c.rows if r.profile == "a")
    assert (a.verdict, a.noise, a.noise_assumed) == ("within noise", ASSUMED_NOISE, True)
    assert any("assumed 5%" in n for n in c.notes)


def test_only_like_with_like() -> None:
    rows = [m("other-spec", 200.0, spec="s2"), m("other-gpus", 200.0, gpus="8x A100"),
            m("other-prompts", 200.0, prompts="p2"), m("ok", 100.0), m("baseline", 80.0)]  # fmt: skip
    c = compare(rows, baseline="baseline")
    assert {r.profile for r in c.rows} == {"ok", "baseline"}
    assert len(c.notes) == 4  # three left out, and the assumed noise
    assert any(n.startswith("other-spec: benchmarked with other spec") for n in c.notes)
    assert any(n.startswith("other-gpus: benchmarked with other GPUs") for n in c.notes)
    # Asking for the other spec compares that one instead.
    c2 = compare(rows, baseline="baseline", spec_hash="s2")
    assert [r.profile for r in c2.rows] == ["other-spec"]
    assert "baseline 'baseline' has no benchmark of this spec: no speedups" in c2.notes


def test_nothing_recorded() -> None:
    c = compare([], baseline="baseline")
    assert c.rows == []
    assert c.notes == ["no benchmarks recorded yet"]
