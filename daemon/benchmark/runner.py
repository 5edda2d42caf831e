"""A benchmark run against the active profile: for each load level, warm-ups, the engine's counters
scraped, the measured requests, the counters again; then everything stored with its provenance. Progress
goes through the RunRecorder (events, SSE, log) and the host status' job line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from daemon import __version__
from daemon.benchmark.client import LevelResult, Request, run_level
from daemon.benchmark.metrics import RequestRecord, summarize
from daemon.benchmark.prompts import base_prompts, new_salt, prompt_set_hash, salted
from daemon.benchmark.spec import BenchmarkSpec
from daemon.core.jsontypes import RequestBody, StoredJson, VllmSummary
from daemon.core.profiles import LoadedProfile
from daemon.core.run_types import Outcome, Phase, Progress
from daemon.engines import engine_for
from daemon.engines.base import Engine, MetricsSnapshot, delta
from daemon.engines.client import Prober
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import BenchStore, LevelRow
from daemon.store.models import Benchmark

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


HttpFactory = Callable[[int, float], httpx.AsyncClient]  # (connections, timeout) -> client
Hardware = Callable[[list[int]], tuple[list[str], str | None]]  # GPU indices -> (names, driver)


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
    def of(cls, i: int, n: int, conc: int | None, rate: float | None) -> Level:
        shape = (
            f"{rate:g} req/s" + (f", max concurrency {conc}" if conc else "")
            if rate
            else f"concurrency {conc}"
        )
        return cls(conc, rate, f"level {i + 1}/{n}: {shape}")


class BenchmarkRunner:
    def __init__(
        self, *, recorder: RunRecorder, bench_store: BenchStore, http: HttpFactory, hardware: Hardware
    ) -> None:
        self.recorder = recorder
        self.bench_store = bench_store
        self.http = http
        self.hardware = hardware

    async def run(
        self,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        *,
        experiment_run_id: int | None = None,
        repeat: int = 0,
        say: Callable[[str], None] = lambda _: None,
    ) -> Outcome:
        """The whole benchmark; stored even when cancelled or failed (the levels it finished)."""
        engine = engine_for(target.lp.profile)
        levels = [Level.of(i, len(spec.levels()), c, r) for i, (c, r) in enumerate(spec.levels())]
        client = self.http(max((lv.concurrency or spec.num_prompts) for lv in levels), spec.request_timeout_s)
        bench = _Benchmark(self.recorder, run_id, spec, target, engine, client, say)
        outcome, error = Outcome.OK, None
        provenance: StoredJson | None = None
        try:
            provenance = await self._provenance(client, spec, target, engine)
            bench.prepare()
            for level in levels:
                await bench.level(level)
        except asyncio.CancelledError:
            outcome, error = Outcome.CANCELLED, "cancelled by request"
            if (task := asyncio.current_task()) is not None:
                task.uncancel()
        except Exception as e:  # the engine vanished, a bug: the run fails with it, recorded
            log.exception("run %d: benchmark failed", run_id)
            outcome, error = Outcome.FAILED, f"{type(e).__name__}: {e}"
        finally:
            await client.aclose()
        if outcome is Outcome.OK and bench.out.problems:
            outcome, error = Outcome.FAILED, "; ".join(bench.out.problems)
        await self._store(run_id, spec, target, provenance, bench.out, experiment_run_id, repeat)
        await self.recorder.finish(run_id, outcome, error=error, detail=_describe(bench.out) or None)
        return outcome

    async def _store(
        self,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        provenance: StoredJson | None,
        out: Outcomes,
        experiment_run_id: int | None,
        repeat: int,
    ) -> None:
        first = out.levels[0].summary if out.levels else {}
        bench = Benchmark(
            run_id=run_id,
            profile=target.lp.profile.name,
            serving_run_id=target.serving_run_id,
            experiment_run_id=experiment_run_id,
            repeat=repeat,
            spec=spec.model_dump_json(),
            spec_hash=spec.digest(),
            prompt_hash=prompt_set_hash(spec),
            provenance=json.dumps(provenance or {}),
            gpu_key=_gpu_key(provenance or {}),
            output_throughput=first.get("output_throughput"),
            acceptance_length=first.get("acceptance_length"),
            acceptance_rate=first.get("acceptance_rate"),
            other_traffic=any(lv.summary.get("other_traffic") for lv in out.levels),
        )
        await asyncio.to_thread(self.bench_store.save, bench, out.levels)

    async def _provenance(
        self, client: httpx.AsyncClient, spec: BenchmarkSpec, target: Target, engine: Engine
    ) -> StoredJson:
        """What produced the numbers (stored with them; GET /benchmarks shows it as `provenance`)."""
        p = target.lp.profile
        version = None
        if path := engine.version_path():
            try:
                r = await client.get(p.base_url + path, timeout=10)
                version = engine.parse_version(r.text) if r.status_code == 200 else None
            except httpx.HTTPError:
                version = None
        names, driver = await asyncio.to_thread(self.hardware, list(p.gpus))
        return {
            "profile": p.name,
            "profile_sha256": target.profile_sha256,
            "argv": target.argv,
            "serving_run_id": target.serving_run_id,
            "engine": engine.name,
            "engine_version": version,
            "model": p.model,
            "served_model_name": p.served_model_name,
            "drafter": p.speculative.draft_model if p.speculative else None,
            "gpus": list(p.gpus),
            "gpu_names": names,
            "driver": driver,
            "spec_hash": spec.digest(),
            "prompt_hash": prompt_set_hash(spec),
            "k25_ctl_version": __version__,
        }


def _gpu_key(provenance: StoredJson) -> str:
    names = provenance.get("gpu_names") or []
    return f"{len(names)}x " + "+".join(sorted(set(names))) if names else ""


def _describe(out: Outcomes) -> str:
    return "; ".join(
        f"c={lv.concurrency or '-'} rate={lv.request_rate or 'inf'}: "
        f"{lv.summary['output_throughput']:.1f} tok/s, "
        f"{lv.summary['completed']} ok, {lv.summary['failed']} failed"
        for lv in out.levels
    )


class _Benchmark:
    """One benchmark in progress: what it measures, its client and request bodies, what it has measured."""

    def __init__(
        self,
        recorder: RunRecorder,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        engine: Engine,
        client: httpx.AsyncClient,
        say: Callable[[str], None],
    ) -> None:
        self.recorder = recorder
        self.run_id = run_id
        self.spec = spec
        self.target = target
        self.engine = engine
        self.client = client
        self.say = say
        self.prober = Prober(client)
        self.bodies: list[tuple[str, RequestBody]] = []
        self.out = Outcomes()

    def prepare(self) -> None:
        """The request bodies (the prompts, salted when the spec says so), once for every level."""
        self.bodies = self._bodies()

    def _bodies(self) -> list[tuple[str, RequestBody]]:
        spec, profile = self.spec, self.target.lp.profile
        salt = new_salt() if spec.salt else None
        return [
            self.engine.bench_request(
                profile,
                salted(prompt.text, salt, i),
                max_tokens=spec.max_tokens,
                temperature=spec.temperature,
                ignore_eos=spec.eos_ignored,
                chat=spec.endpoint == "chat",
            )
            for i, prompt in enumerate(base_prompts(spec))
        ]

    async def _event(self, detail: str, progress: Progress | None = None) -> None:
        await self.recorder.event(self.run_id, Phase.MEASURING, detail, progress=progress)

    async def _counters(self) -> MetricsSnapshot:
        p = self.target.lp.profile
        return self.engine.snapshot(p, await self.prober.scrape(p, self.engine))

    async def level(self, level: Level) -> None:
        """Warm-ups, the engine's counters, the measured requests, the counters again; then the summary."""
        await self._warm_up(level)
        before = await self._counters()
        result = await self._measure(level)
        after = await self._counters()
        summary = summarize(result.records, result.duration)
        summary |= {
            "max_concurrency": level.concurrency,
            "request_rate": level.rate or "inf",
            "num_prompts": len(self.bodies),
        }
        summary |= counter_keys(self.engine, before, after, self.target.lp)
        extra = other_traffic(summary, result.records)
        summary |= {"other_traffic": extra > 0, "other_traffic_tokens": extra}
        await self._keep(level, summary, result.records, extra)

    async def _warm_up(self, level: Level) -> None:
        spec, base = self.spec, self.target.lp.profile.base_url
        if not spec.warmups:
            return
        await self._event(f"{level.label}: {spec.warmups} warm-up request(s)")
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
        total, step = len(requests), max(1, len(requests) // 10)
        await self._event(f"{level.label}: {total} request(s)", Progress(0, 0, total))
        pending: set[asyncio.Task[None]] = set()
        done = 0

        def finished(_: RequestRecord) -> None:
            nonlocal done
            done += 1
            self.say(f"{level.label}, {done}/{total} requests")
            if done % step == 0 or done == total:  # a tenth at a time: events are stored rows
                t = asyncio.get_running_loop().create_task(
                    self._event(f"{level.label}: {done}/{total}", Progress(100 * done // total, done, total))
                )
                pending.add(t)
                t.add_done_callback(pending.discard)

        result = await run_level(
            self.client,
            requests,
            concurrency=level.concurrency,
            rate=level.rate,
            timeout_s=self.spec.request_timeout_s,
            seed=self.spec.seed,
            on_done=finished,
        )
        if pending:
            await asyncio.gather(*pending)
        return result

    async def _keep(
        self, level: Level, summary: VllmSummary, records: list[RequestRecord], extra: float
    ) -> None:
        if extra:
            await self._event(
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
