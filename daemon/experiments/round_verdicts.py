"""What an experiment's rounds say: whether two profiles are decided after a round (sequential.py), and the
verdicts at its end, from its own benchmarks."""

from __future__ import annotations

import asyncio

from daemon.core.errors import K25Error
from daemon.core.run_types import Outcome
from daemon.experiments import sequential
from daemon.experiments.across import across_load
from daemon.experiments.comparison_read import Judging
from daemon.experiments.per_request import verdict_lines
from daemon.experiments.record import Record
from daemon.experiments.request import ExperimentRequest
from daemon.store.bench import BenchmarkView, BenchStore


async def by_round(bench_store: BenchStore, record: Record) -> dict[str, list[BenchmarkView]]:
    """Each profile's first benchmark of each round, in round order (the ones that ended ok)."""
    per: dict[str, list[BenchmarkView]] = {}
    for s in record.steps:
        for run in s.benchmark_run_ids[:1]:
            view = await asyncio.to_thread(bench_store.get, run_id=run, requests=False)
            if view is not None and view.run.outcome == Outcome.OK:
                per.setdefault(s.profile, []).append(view)
    return per


async def decided(bench_store: BenchStore, record: Record, rounds: int, req: ExperimentRequest) -> str | None:
    """After a round: whether every level's output throughput is decided between the two profiles, from
    each round's benchmark of each; None: measure another round."""
    per = {
        name: [[float(x.get("output_throughput") or 0.0) for x in v.summaries] for v in views]
        for name, views in (await by_round(bench_store, record)).items()
    }
    a, b = (per.get(name, []) for name in req.profiles)
    if min(len(a), len(b)) < 2 or any(0.0 in f for f in (*a, *b)):
        return None
    levels = range(min(len(f) for f in (*a, *b)))
    looks = [sequential.look([f[i] for f in a], [f[i] for f in b], req.rounds) for i in levels]
    return sequential.stop(looks, rounds, req.rounds)


async def verdicts(
    judging: Judging, bench_store: BenchStore, run_id: int, record: Record, profiles: list[str]
) -> list[str]:
    """Each profile against the first one, from this experiment's requests; a drift of the first."""
    try:
        c = await judging.compare(baseline=profiles[0], experiment=run_id)
    except K25Error as e:
        return [f"no verdicts: {e}"]
    lines = verdict_lines(c) + [n for n in c.notes if n.startswith("drift")]
    if len(profiles) == 2:  # across load: per-level ratios and the crossover, or the capacity ratio
        per = await by_round(bench_store, record)
        lines += across_load(per.get(profiles[0], []), per.get(profiles[1], []))
    return lines
