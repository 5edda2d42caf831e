"""One benchmark in progress: its request bodies (the prompts, salted), and for each load level the
warm-ups, the engine's counters, the measured requests, the counters again and the level's summary (per
prompt category too)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from daemon.core.jsontypes import RequestBody, StoredJson, VllmSummary
from daemon.core.profiles import LoadedProfile
from daemon.core.run_types import Phase, Progress
from daemon.datasets.shapes import PATHS, salted_body
from daemon.engines.base import Engine
from daemon.engines.client import Prober
from daemon.engines.engine_types import MetricsSnapshot
from daemon.engines.metric_text import delta
from daemon.measure.acceptance import AcceptancePass
from daemon.measure.client import LevelResult, Request, run_level
from daemon.measure.metrics import RequestRecord, by_category, summarize
from daemon.measure.prompts import PromptSet, new_salt, salted
from daemon.measure.slo import Slo
from daemon.measure.slo import judge as judge_slo
from daemon.measure.spec import BenchmarkSpec
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import LevelRow

log = logging.getLogger("k25.runner")
# Counters that moved more than the benchmark's own requests explain: someone else used the engine.
OTHER_TRAFFIC_SLACK = 0.02


@dataclass(frozen=True)
class Target:
    """What is measured: the active profile, its serving run, and what the switch recorded for it."""

    lp: LoadedProfile
    serving_run_id: int | None
    argv: list[str] | None
    profile_sha256: str | None


@dataclass
class Outcomes:
    levels: list[LevelRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the run found beyond its levels (a capacity)


def counter_keys(
    engine: Engine, before: MetricsSnapshot, after: MetricsSnapshot, lp: LoadedProfile
) -> VllmSummary:
    """The acceptance figures of one level from the engine's counters, with vLLM's bench key names (its
    rate in percent) beside k25-ctl's (fractions; `normalized_rate` comparable across engines)."""
    d = engine.usage_delta(lp.profile, before, after)
    out: VllmSummary = {
        "engine_prompt_tokens": d.prompt_tokens,
        "engine_generation_tokens": d.generation_tokens,
        "acceptance_length": d.acceptance_length,
        "acceptance_rate": d.acceptance_rate,
        "normalized_rate": d.normalized_rate,
    }
    if d.acceptance_length is not None:
        out |= {
            "spec_decode_acceptance_length": d.acceptance_length,
            "spec_decode_acceptance_rate": None if d.acceptance_rate is None else d.acceptance_rate * 100.0,
            "spec_decode_per_position_acceptance_rates": d.per_position or None,
            "spec_decode_num_drafts": delta(after.spec_drafts, before.spec_drafts),
            "spec_decode_draft_tokens": delta(after.spec_draft_tokens, before.spec_draft_tokens),
            "spec_decode_accepted_tokens": delta(after.spec_accepted, before.spec_accepted),
        }
    return out


def other_traffic(summary: VllmSummary, records: list[RequestRecord]) -> float:
    """Generated tokens the engine counted beyond this level's own requests (0: nobody else)."""
    engine_tokens = summary.get("engine_generation_tokens")
    if engine_tokens is None:
        return 0.0
    own = sum(r.output_tokens for r in records)
    extra = float(engine_tokens) - own
    return extra if extra > own * OTHER_TRAFFIC_SLACK + 8 else 0.0


@dataclass(frozen=True)
class Level:
    """One load level of a benchmark: a concurrency, or a request rate (with an optional cap)."""

    concurrency: int | None
    rate: float | None
    label: str

    @classmethod
    def of(cls, i: int, n: int, conc: int | None, rate: float | None, pace: float | None = None) -> Level:
        cap = f", max concurrency {conc}" if conc else ""
        if pace is not None:
            return cls(conc, None, f"level {i + 1}/{n}: captured arrivals x{pace:g}{cap}")
        shape = (
            f"{rate:g} req/s" + (f", max concurrency {conc}" if conc else "")
            if rate
            else f"concurrency {conc}"
        )
        return cls(conc, rate, f"level {i + 1}/{n}: {shape}")


class ProgressEvents:
    """A level's requests counted as they end: said each time, stored as an event a tenth at a time."""

    def __init__(self, bench: Measurement, label: str, total: int) -> None:
        self.bench = bench
        self.label = label
        self.total = total
        self.done = 0
        self.last: asyncio.Task[None] | None = None  # the newest progress event's write

    async def _after(self, previous: asyncio.Task[None] | None, detail: str, progress: Progress) -> None:
        # In order: each write waits for the one before it (side by side, 10/10 could be stored before
        # 7/10, and a follower's bar would end at 70%).
        if previous is not None:
            await previous
        await self.bench.event(detail, progress)

    def finished(self, _: RequestRecord) -> None:
        self.done += 1
        done, total = self.done, max(self.total, self.done)
        self.bench.say(f"{self.label}, {done}/{total} requests")
        if done % max(1, total // 10) == 0 or done == total:  # events are stored rows
            progress = Progress(min(100, 100 * done // total), done, total)
            coro = self._after(self.last, f"{self.label}: {done}/{total}", progress)
            self.last = asyncio.get_running_loop().create_task(coro)

    async def written(self) -> None:
        if self.last is not None:
            await self.last


class Measurement:
    """One benchmark in progress: what it measures, its client and request bodies, what it has measured."""

    def __init__(
        self,
        recorder: RunRecorder,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        engine: Engine,
        client: httpx.AsyncClient,
        prompts: PromptSet,
        say: Callable[[str], None],
        slo: Slo | None = None,
    ) -> None:
        self.slo = slo  # each level judged against it (goodput, met or missed)
        self.recorder = recorder
        self.run_id = run_id
        self.spec = spec
        self.target = target
        self.engine = engine
        self.client = client
        self.say = say
        self.prober = Prober(client)
        self.prompts = prompts
        self.bodies: list[tuple[str, RequestBody]] = []
        self.salt: str | None = None
        self.out = Outcomes()

    def prepare(self) -> None:
        """The request bodies (the prompts, salted when the spec says so), once for every level."""
        self.salt = new_salt() if self.spec.salt else None
        self.bodies = [self.body(i) for i in range(len(self.prompts.prompts))]

    def body(self, i: int) -> tuple[str, RequestBody]:
        """Request i: prompt i (round again past the last). A dataset's requests carry one salt for the run
        (their shared prefixes stay shared, as in production; each round again its own), the built-in
        sources one per request."""
        spec, profile = self.spec, self.target.lp.profile
        n = len(self.prompts.prompts)
        prompt, rounds = self.prompts.prompts[i % n], i // n
        if prompt.body is not None and prompt.endpoint is not None:
            salt = f"{self.salt}.{rounds}" if self.salt and rounds else self.salt
            return self.engine.replay_request(
                profile,
                PATHS[prompt.endpoint],
                salted_body(prompt.body, salt),
                max_tokens=prompt.output_tokens or spec.max_tokens,
                ignore_eos=spec.eos_ignored,
            )
        return self.engine.bench_request(
            profile,
            salted(prompt.text, self.salt, i),
            max_tokens=spec.max_tokens,
            temperature=spec.temperature,
            ignore_eos=spec.eos_ignored,
            chat=spec.endpoint == "chat",
        )

    def _arrivals(self) -> list[float] | None:
        """A paced replay's arrival times (its dataset's, `pace` times faster); None: the level's own."""
        if self.spec.pace is None:
            return None
        return [(p.offset_s or 0.0) / self.spec.pace for p in self.prompts.prompts]

    async def event(self, detail: str, progress: Progress | None = None) -> None:
        await self.recorder.event(self.run_id, Phase.MEASURING, detail, progress=progress)

    async def counters(self) -> MetricsSnapshot:
        p = self.target.lp.profile
        return self.engine.snapshot(p, await self.prober.scrape(p, self.engine))

    async def level(self, level: Level) -> None:
        """Warm-ups, the engine's counters, the measured requests, the counters again; then the summary."""
        await self.warm_up(level)
        before = await self.counters()
        result = await self._measure(level)
        after = await self.counters()
        summary = summarize(result.records, result.duration)
        if self.slo is not None:
            summary |= judge_slo(result.records, summary, self.slo)
        await self.complete(level, summary, result.records, (before, after))

    async def complete(
        self,
        level: Level,
        summary: VllmSummary,
        records: list[RequestRecord],
        counters: tuple[MetricsSnapshot, MetricsSnapshot],
        unmeasured_tokens: float = 0.0,
    ) -> None:
        """A measured level's summary completed (its shape, the engine's counters, the categories, the
        acceptance pass, other traffic) and kept. `unmeasured_tokens`: at most how many tokens the engine
        generated for this benchmark's own requests that `records` leave out (a step's warm-up)."""
        summary |= {
            "max_concurrency": level.concurrency,
            "request_rate": level.rate or "inf",
            "num_prompts": len(records),
        }
        summary |= counter_keys(self.engine, *counters, self.target.lp)
        spec_cfg = self.target.lp.profile.speculative
        drafts = spec_cfg.num_speculative_tokens if spec_cfg else None
        cats = self.prompts.categories  # request i is prompt i, round again past the last (body)
        summary["categories"] = by_category(records, [cats[r.index % len(cats)] for r in records], drafts)
        if self.spec.acceptance_by_category and spec_cfg is not None:
            summary["category_acceptance"] = await self._acceptance(level)
        extra = max(0.0, other_traffic(summary, records) - unmeasured_tokens)
        summary |= {"other_traffic": extra > 0, "other_traffic_tokens": extra}
        await self._keep(level, summary, records, extra)

    async def _acceptance(self, level: Level) -> StoredJson:
        await self.event(f"{level.label}: acceptance per category")
        self.say(f"{level.label}, acceptance per category")
        found = AcceptancePass(
            self.engine,
            self.target.lp.profile,
            self.client,
            self.counters,
            concurrency=level.concurrency,
            timeout_s=self.spec.request_timeout_s,
        )
        return await found.run(self.prompts, self.bodies, self.spec.max_tokens, self.spec.eos_ignored)

    async def warm_up(self, level: Level) -> None:
        spec, base = self.spec, self.target.lp.profile.base_url
        if not spec.warmups:
            return
        await self.event(f"{level.label}: {spec.warmups} warm-up request(s)")
        self.say(f"{level.label}, warming up")
        short = {"max_tokens": min(16, spec.max_tokens)}
        warm = [Request(base + path, body | short) for path, body in self.bodies[: spec.warmups]]
        await run_level(
            self.client,
            warm,
            concurrency=min(spec.warmups, level.concurrency or spec.warmups),
            rate=None,
            timeout_s=spec.request_timeout_s,
        )

    async def _measure(self, level: Level) -> LevelResult:
        base = self.target.lp.profile.base_url
        requests = [Request(base + path, body) for path, body in self.bodies]
        progress = await self.progress(level, len(requests))
        result = await run_level(
            self.client,
            requests,
            concurrency=level.concurrency,
            rate=level.rate,
            timeout_s=self.spec.request_timeout_s,
            seed=self.spec.seed,
            arrivals=self._arrivals(),
            on_done=progress.finished,
        )
        await progress.written()
        return result

    async def progress(self, level: Level, total: int) -> ProgressEvents:
        """The level's progress, said and stored as its requests end (a tenth at a time)."""
        await self.event(f"{level.label}: {total} request(s)", Progress(0, 0, total))
        return ProgressEvents(self, level.label, total)

    async def _keep(
        self, level: Level, summary: VllmSummary, records: list[RequestRecord], extra: float
    ) -> None:
        if extra:
            await self.event(
                f"{level.label}: the engine generated {extra:.0f} tokens for other clients "
                "during the level: its acceptance figures include them"
            )
        total = len(records)
        if summary["completed"] == 0:
            errors = "; ".join(summary["errors"][:2])
            self.out.problems.append(f"{level.label}: all {total} requests failed ({errors})")
        rows = [r.to_row() for r in records]
        self.out.levels.append(LevelRow(level.concurrency, level.rate, summary, rows))
        log.info(
            "run %d: %s: %.1f tok/s out, %d ok, %d failed",
            self.run_id,
            level.label,
            summary["output_throughput"],
            summary["completed"],
            summary["failed"],
        )
