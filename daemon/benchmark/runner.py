"""A benchmark run against the active profile: for each load level, warm-ups, the engine's counters
scraped, the measured requests, the counters again; then everything stored with its provenance. Progress
goes through the RunRecorder (events, SSE, log) and the host status' job line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from daemon import __version__
from daemon.benchmark.client import Request, run_level
from daemon.benchmark.metrics import RequestRecord, summarize
from daemon.benchmark.prompts import base_prompts, new_salt, prompt_set_hash, salted
from daemon.benchmark.spec import BenchmarkSpec
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
) -> dict[str, Any]:
    """The acceptance figures of one level from the engine's counters, with vLLM's bench key names (its
    rate in percent) beside k25-ctl's (fractions; `normalized_rate` comparable across engines)."""
    d = engine.usage_delta(lp.profile, before, after)
    out: dict[str, Any] = {
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


def other_traffic(summary: dict[str, Any], records: list[RequestRecord]) -> float:
    """Generated tokens the engine counted beyond this level's own requests (0: nobody else)."""
    engine_tokens = summary.get("engine_generation_tokens")
    if engine_tokens is None:
        return 0.0
    own = sum(r.output_tokens for r in records)
    extra = float(engine_tokens) - own
    return extra if extra > own * OTHER_TRAFFIC_SLACK + 8 else 0.0


class BenchmarkRunner:
    def __init__(
        self, *, recorder: RunRecorder, bench_store: BenchStore, http: HttpFactory, hardware: Hardware
    ) -> None:
        self.recorder, self.bench_store, self.http, self.hardware = recorder, bench_store, http, hardware

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
        p = target.lp.profile
        engine = engine_for(p)
        levels = spec.levels()
        connections = max((c or spec.num_prompts) for c, _ in levels)
        client = self.http(connections, spec.request_timeout_s)
        out = Outcomes()
        outcome, error = Outcome.OK, None
        provenance: dict[str, Any] = {}
        try:
            provenance = await self._provenance(client, spec, target, engine)
            bodies = self._bodies(spec, target, engine)
            for i, (conc, rate) in enumerate(levels):
                label = f"level {i + 1}/{len(levels)}: " + (
                    f"{rate:g} req/s" + (f", max concurrency {conc}" if conc else "")
                    if rate
                    else f"concurrency {conc}"
                )
                await self._level(run_id, spec, target, engine, client, bodies, (conc, rate), label, out, say)
        except asyncio.CancelledError:
            outcome, error = Outcome.CANCELLED, "cancelled by request"
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        except Exception as e:  # the engine vanished, a bug: the run fails with it, recorded
            log.exception("run %d: benchmark failed", run_id)
            outcome, error = Outcome.FAILED, f"{type(e).__name__}: {e}"
        finally:
            await client.aclose()
        if outcome is Outcome.OK and out.problems:
            outcome, error = Outcome.FAILED, "; ".join(out.problems)
        first = out.levels[0].summary if out.levels else {}
        bench = Benchmark(
            run_id=run_id,
            profile=p.name,
            serving_run_id=target.serving_run_id,
            experiment_run_id=experiment_run_id,
            repeat=repeat,
            spec=spec.model_dump_json(),
            spec_hash=spec.digest(),
            prompt_hash=prompt_set_hash(spec),
            provenance=json.dumps(provenance),
            gpu_key=_gpu_key(provenance),
            output_throughput=first.get("output_throughput"),
            acceptance_length=first.get("acceptance_length"),
            acceptance_rate=first.get("acceptance_rate"),
            other_traffic=any(lv.summary.get("other_traffic") for lv in out.levels),
        )
        await asyncio.to_thread(self.bench_store.save, bench, out.levels)
        detail = "; ".join(
            f"c={lv.concurrency or '-'} rate={lv.request_rate or 'inf'}: "
            f"{lv.summary['output_throughput']:.1f} tok/s, "
            f"{lv.summary['completed']} ok, {lv.summary['failed']} failed"
            for lv in out.levels
        )
        await self.recorder.finish(run_id, outcome, error=error, detail=detail or None)
        return outcome

    def _bodies(
        self, spec: BenchmarkSpec, target: Target, engine: Engine
    ) -> list[tuple[str, dict[str, Any]]]:
        salt = new_salt() if spec.salt else None
        return [
            engine.bench_request(
                target.lp.profile,
                salted(prompt.text, salt, i),
                max_tokens=spec.max_tokens,
                temperature=spec.temperature,
                ignore_eos=spec.eos_ignored,
                chat=spec.endpoint == "chat",
            )
            for i, prompt in enumerate(base_prompts(spec))
        ]

    async def _level(
        self,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        engine: Engine,
        client: httpx.AsyncClient,
        bodies: list[tuple[str, dict[str, Any]]],
        shape: tuple[int | None, float | None],
        label: str,
        out: Outcomes,
        say: Callable[[str], None],
    ) -> None:
        conc, rate = shape
        base = target.lp.profile.base_url
        requests = [Request(base + path, body) for path, body in bodies]
        if spec.warmups:
            await self.recorder.event(run_id, Phase.MEASURING, f"{label}: {spec.warmups} warm-up request(s)")
            say(f"{label}, warming up")
            warm = [
                Request(base + path, body | {"max_tokens": min(16, spec.max_tokens)}) for path, body in bodies
            ]
            await run_level(
                client,
                warm[: spec.warmups],
                concurrency=min(spec.warmups, conc or spec.warmups),
                rate=None,
                timeout_s=spec.request_timeout_s,
            )
        prober = Prober(client)
        before = engine.snapshot(target.lp.profile, await prober.scrape(target.lp.profile, engine))
        total, step = len(requests), max(1, len(requests) // 10)
        done = 0
        await self.recorder.event(
            run_id, Phase.MEASURING, f"{label}: {total} request(s)", progress=Progress(0, 0, total)
        )
        pending: set[asyncio.Task[None]] = set()

        def finished(_: RequestRecord) -> None:
            nonlocal done
            done += 1
            say(f"{label}, {done}/{total} requests")
            if done % step == 0 or done == total:
                t = asyncio.get_running_loop().create_task(
                    self.recorder.event(
                        run_id,
                        Phase.MEASURING,
                        f"{label}: {done}/{total}",
                        progress=Progress(100 * done // total, done, total),
                    )
                )
                pending.add(t)
                t.add_done_callback(pending.discard)

        result = await run_level(
            client,
            requests,
            concurrency=conc,
            rate=rate,
            timeout_s=spec.request_timeout_s,
            seed=spec.seed,
            on_done=finished,
        )
        if pending:
            await asyncio.gather(*pending)
        after = engine.snapshot(target.lp.profile, await prober.scrape(target.lp.profile, engine))
        summary = summarize(result.records, result.duration)
        summary |= {"max_concurrency": conc, "request_rate": rate if rate else "inf", "num_prompts": total}
        summary |= counter_keys(engine, before, after, target.lp)
        extra = other_traffic(summary, result.records)
        summary |= {"other_traffic": extra > 0, "other_traffic_tokens": extra}
        if extra:
            await self.recorder.event(
                run_id,
                Phase.MEASURING,
                f"{label}: the engine generated {extra:.0f} tokens for other clients during the level: its "
                "acceptance figures include them",
            )
        if summary["completed"] == 0:
            out.problems.append(f"{label}: all {total} requests failed ({'; '.join(summary['errors'][:2])})")
        out.levels.append(LevelRow(conc, rate, summary, [r.to_row() for r in result.records]))
        log.info(
            "run %d: %s: %.1f tok/s out, %d ok, %d failed",
            run_id,
            label,
            summary["output_throughput"],
            summary["completed"],
            summary["failed"],
        )

    async def _provenance(
        self, client: httpx.AsyncClient, spec: BenchmarkSpec, target: Target, engine: Engine
    ) -> dict[str, Any]:
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


def _gpu_key(provenance: dict[str, Any]) -> str:
    names = provenance.get("gpu_names") or []
    return f"{len(names)}x " + "+".join(sorted(set(names))) if names else ""
