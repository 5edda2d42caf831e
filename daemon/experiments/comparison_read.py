"""The comparison as the API, the CLI and an experiment's last event show it: the stored benchmarks read,
compared (experiments/compare.py), and judged from their requests (experiments/per_request.py)."""

from __future__ import annotations

import asyncio

from daemon.core.kept import Kept
from daemon.experiments.compare import Comparison, compare, finished
from daemon.experiments.per_request import Memo, judge_rows, samples_of
from daemon.store.bench import BenchmarkView, BenchStore

COMPARE_WINDOW = 500  # newest benchmarks compare reads
MEMO_MAX = 1000  # judgements kept
ANSWERS_KEPT = 64  # comparisons kept (per baseline, spec and experiment) until the benchmarks change


class Judging:
    def __init__(self, *, bench_store: BenchStore) -> None:
        self.bench_store = bench_store
        self._memo: Memo = {}  # stored benchmarks never change: their judgement is kept
        self._answers = Kept[tuple[list[BenchmarkView], Comparison]](ANSWERS_KEPT)

    async def compare(
        self, *, baseline: str, spec_hash: str | None = None, experiment: int | None = None
    ) -> Comparison:
        """`experiment`: that experiment's benchmarks only (its rounds pooled per profile)."""
        return (await self.judged(baseline=baseline, spec_hash=spec_hash, experiment=experiment))[1]

    async def judged(
        self, *, baseline: str, spec_hash: str | None = None, experiment: int | None = None
    ) -> tuple[list[BenchmarkView], Comparison]:
        """The window read and its comparison, kept until a benchmark is saved or a benchmark's run ends
        (BenchStore.changes): the page asks /compare on every refresh, and judging a year's window reads
        and decodes hundreds of request blobs (perf/history.py: 183 ms over 96 benchmarks, recomputed each
        time). Callers only read the answer."""

        async def build() -> tuple[list[BenchmarkView], Comparison]:
            views = await self.window(experiment)
            return views, await self.of(views, baseline=baseline, spec_hash=spec_hash)

        key = (baseline, spec_hash, experiment)
        return await self._answers.get(self.bench_store.changes, key, build)

    async def window(self, experiment: int | None = None) -> list[BenchmarkView]:
        """The newest benchmarks compare reads (`experiment`: that experiment's only)."""
        return await asyncio.to_thread(self.bench_store.recent, limit=COMPARE_WINDOW, experiment=experiment)

    async def of(
        self, views: list[BenchmarkView], *, baseline: str, spec_hash: str | None = None
    ) -> Comparison:
        """The comparison of benchmarks already read, judged."""
        result = compare(finished(views), baseline=baseline, spec_hash=spec_hash)
        ids = [rid for row in result.rows for rid in row.run_ids]
        if ids:
            await asyncio.to_thread(self._judge, result, ids)
        return result

    def _judge(self, result: Comparison, ids: list[int]) -> None:
        """Blocking (the rows read, thousands of bootstrap resamples): in a worker thread."""
        found = self.bench_store.first_requests(ids)
        if len(self._memo) > MEMO_MAX:
            self._memo.clear()
        judge_rows(result, {rid: samples_of(rows) for rid, rows in found.items()}, self._memo)
