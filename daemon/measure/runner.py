"""A benchmark run against the active profile: for each load level, warm-ups, the engine's counters
scraped, the measured requests, the counters again; then everything stored with its provenance. Progress
goes through the RunRecorder (events, SSE, log) and the host status' job line."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping

import httpx

from daemon import __version__
from daemon.core.errors import InvalidInput
from daemon.core.jsontypes import StoredJson
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.datasets.service import Replay
from daemon.engines import engine_for
from daemon.engines.base import Engine
from daemon.measure import capacity, capacity_level, interchange, slo
from daemon.measure.levels import Level, Measurement, Outcomes, Target
from daemon.measure.prompts import PromptSet, builtin_set, replay_set
from daemon.measure.spec import BenchmarkSpec
from daemon.runs.recorder import RunRecorder
from daemon.store.bench import BenchStore
from daemon.store.models import Benchmark

log = logging.getLogger("k25.runner")
HttpFactory = Callable[[int, float], httpx.AsyncClient]  # (connections, timeout) -> client
Hardware = Callable[[list[int]], tuple[list[str], str | None]]  # GPU indices -> (names, driver)
Loader = Callable[[str], Replay]  # a stored dataset by name (blocking)


class BenchmarkRunner:
    def __init__(
        self,
        *,
        recorder: RunRecorder,
        bench_store: BenchStore,
        http: HttpFactory,
        hardware: Hardware,
        datasets: Loader,
        slos: Mapping[str, str],
    ) -> None:
        self.recorder = recorder
        self.bench_store = bench_store
        self.http = http
        self.hardware = hardware
        self.datasets = datasets
        self.slos = slos  # the settings' named SLOs

    def slo_of(self, spec: BenchmarkSpec) -> slo.Slo | None:
        """The spec's SLO: named in the settings, or inline; InvalidInput naming what is wrong."""
        if spec.slo is None:
            return None
        text = self.slos.get(spec.slo, spec.slo)
        if "=" not in text:
            names = ", ".join(sorted(self.slos)) or "none"
            raise InvalidInput(
                f"no SLO named {spec.slo!r} (the settings' [slos]: {names}); or give one inline"
            )
        return slo.parse(text)

    def prompt_set(self, spec: BenchmarkSpec) -> PromptSet:
        """Blocking: the spec's prompts (a stored dataset read); NotFound or InvalidInput when it cannot (or
        when its SLO is not one: refused before the run exists, with its prompts)."""
        self.slo_of(spec)
        if not spec.stored:
            return builtin_set(spec)
        try:
            return replay_set(spec, self.datasets(spec.dataset))
        except ValueError as e:
            raise InvalidInput(str(e)) from None

    async def run(
        self,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        prompts: PromptSet,
        *,
        experiment_run_id: int | None = None,
        repeat: int = 0,
        in_round: int | None = None,
        say: Callable[[str], None] = lambda _: None,
    ) -> Outcome:
        """The whole benchmark; stored even when cancelled or failed (the levels it finished). `prompts`:
        the spec's (prompt_set), read once by the caller, however many benchmarks use them."""
        engine = engine_for(target.lp.profile)
        shapes = spec.levels()
        levels = [Level.of(i, len(shapes), c, r, spec.pace) for i, (c, r) in enumerate(shapes)]
        connections = max((lv.concurrency or spec.num_prompts) for lv in levels)
        if spec.capacity is not None and spec.max_concurrency is None:  # an open stream: none waits for one
            connections = capacity_level.most_sent(spec.num_prompts, spec.capacity)
        client = self.http(connections, spec.request_timeout_s)
        bench = Measurement(
            self.recorder, run_id, spec, target, engine, client, prompts, say, self.slo_of(spec)
        )
        outcome, error = Outcome.OK, None
        provenance: StoredJson | None = None
        try:
            provenance = await self._provenance(client, spec, target, engine)
            provenance |= prompts.provenance | {"prompt_hash": prompts.hash}
            bench.prepare()
            if spec.capacity is None:
                for level in levels:
                    await bench.level(level)
            else:
                await self._search(bench, spec.capacity)
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
        await self._store(
            run_id, spec, target, provenance, bench.out, (experiment_run_id, repeat, in_round, prompts.hash)
        )
        await self.recorder.finish(run_id, outcome, error=error, detail=_describe(bench.out) or None)
        self.bench_store.changed()  # ended ok or not: the newest figures may be this benchmark's now
        return outcome

    async def _search(self, bench: Measurement, cfg: capacity.CapacitySearch) -> None:
        """A capacity search: each step a stored level at the rate the steps before it chose."""
        if bench.slo is None:  # the spec's rule: a search has an SLO
            raise InvalidInput("a capacity search needs an SLO")
        search = capacity.Search(cfg)
        while (rate := search.next_rate()) is not None:
            step = len(search.steps) + 1
            level = Level(bench.spec.max_concurrency, rate, f"capacity step {step}: {rate:.3g} req/s")
            decision = await capacity_level.measure(bench, level, bench.slo, cfg, bench.spec.seed + step)
            search.observe(capacity.figures(rate, bench.out.levels[-1].summary, bench.slo))
            seen = search.steps[-1]
            said = seen.saturation or decision.value
            log.info("run %d: %s: SLO %s (%d measured)", bench.run_id, level.label, said, seen.requests)
        found = search.result()
        bench.out.notes.append(found.text())
        log.info("run %d: %s", bench.run_id, found.text())
        await self.recorder.event(bench.run_id, Phase.MEASURING, found.text())

    async def import_results(self, req: interchange.ImportIn) -> int:
        """A run of figures measured elsewhere (`vllm bench serve` results), stored as a benchmark that says
        it was imported; returns its run id."""
        run_id = await self.recorder.create(NewRun(RunKind.BENCHMARK, req.profile))
        bench, rows = interchange.stored(run_id, req)
        await asyncio.to_thread(self.bench_store.save, bench, rows)
        said = f"imported from {interchange.TOOL}" + (f": {req.label}" if req.label else "")
        log.info("run %d: %d level(s) of %s %s", run_id, len(rows), req.profile, said)
        await self.recorder.finish(run_id, Outcome.OK, detail=said)
        return run_id

    async def _store(
        self,
        run_id: int,
        spec: BenchmarkSpec,
        target: Target,
        provenance: StoredJson | None,
        out: Outcomes,
        of: tuple[int | None, int, int | None, str],  # the experiment's run, repeat, round, prompts' hash
    ) -> None:
        experiment_run_id, repeat, in_round, prompt_hash = of
        first = out.levels[0].summary if out.levels else {}
        bench = Benchmark(
            run_id=run_id,
            profile=target.lp.profile.name,
            serving_run_id=target.serving_run_id,
            experiment_run_id=experiment_run_id,
            repeat=repeat,
            round=in_round,
            spec=spec.model_dump_json(),
            spec_hash=spec.digest(),
            prompt_hash=prompt_hash,
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
            "k25_ctl_version": __version__,
        }


def _gpu_key(provenance: StoredJson) -> str:
    names = provenance.get("gpu_names") or []
    return f"{len(names)}x " + "+".join(sorted(set(names))) if names else ""


def _describe(out: Outcomes) -> str:
    return "; ".join(
        out.notes
        + [
            f"c={lv.concurrency or '-'} rate={lv.request_rate or 'inf'}: "
            f"{lv.summary['output_throughput']:.1f} tok/s, "
            f"{lv.summary['completed']} ok, {lv.summary['failed']} failed"
            for lv in out.levels
        ]
    )
