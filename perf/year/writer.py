"""A year of a busy host written through the store layer (the daemon's own Store, BenchStore,
ServingStore, CaptureStore and DatasetStore; no raw SQL) into a migrated database, the clock moved along
with it (time-machine), so that every row carries the time it would have had.

What a day holds: `switches` switches (each a switch run with its events and teardown record, and the
serving run it starts, stopped by the next); each week `experiments` experiments of `rounds` rounds of two
profiles, each benchmark `levels` concurrency levels of `requests` requests (their per-request records, as
the runner stores them); serving metric rows as the retention leaves them (minute rows for the last two
days, hourly rows for the 90 days before: older ones the retention has deleted); the capture's last
7 days (its retention); a dataset a month."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import time_machine

from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.experiments.record import Record, Restore
from daemon.experiments.record import Step as ExpStep
from daemon.experiments.request import ExperimentRequest
from daemon.experiments.rounds import orders
from daemon.measure.metrics import RequestRecord, summarize
from daemon.measure.spec import BenchmarkSpec
from daemon.store.bench import BenchStore, LevelRow
from daemon.store.capture import Caps, CaptureStore, NewCapture
from daemon.store.datasets import DatasetStore, NewPrompt
from daemon.store.models import Benchmark, Dataset, ServingMetric
from daemon.store.queries import Store
from daemon.store.serving import ServingStore
from daemon.teardown.report import TeardownReport

PROFILES = ("baseline", "vllm-eagle3", "sglang-eagle3")
RATE = {"baseline": 82.5, "vllm-eagle3": 60.0, "sglang-eagle3": 150.0}  # tokens/s per request
ACCEPT = {"baseline": 1.0, "vllm-eagle3": 1.5, "sglang-eagle3": 2.8}  # tokens per chunk
PHASES = (
    Phase.CREATED,
    Phase.DRAINING,
    Phase.STOP,
    Phase.TEARDOWN,
    Phase.START,
    Phase.LOADING,
    Phase.PROBING,
)


@dataclass(frozen=True)
class Year:
    days: int = 365
    switches: int = 20  # a day
    experiments: int = 5  # a week
    rounds: int = 8
    levels: tuple[int, ...] = (1, 4, 16)
    requests: int = 200
    max_tokens: int = 128
    captures: int = 2000  # a day, kept 7 days
    seed: int = 25


@dataclass
class Written:
    runs: int = 0
    benchmarks: int = 0
    levels: int = 0
    request_records: int = 0
    metric_rows: int = 0
    captures: int = 0
    datasets: int = 0


class YearWriter:
    def __init__(self, path: Path, year: Year) -> None:
        self.y = year
        self.rng = random.Random(year.seed)  # noqa: S311 - test data
        self.store = Store.open(path)
        self.bench = BenchStore(self.store)
        self.serving = ServingStore(self.store)
        self.captures = CaptureStore(self.store)
        self.datasets = DatasetStore(self.store)
        self.out = Written()
        self._pool: dict[tuple[str, int], list[LevelRow]] = {}
        self.end = datetime.now(UTC).replace(microsecond=0)
        self.start = self.end - timedelta(days=year.days)

    # -- the pieces --------------------------------------------------------------------------------------

    def _levels(self, profile: str) -> list[LevelRow]:
        """The levels of one benchmark: drawn from a pool of 4 per (profile, level), each with its own
        records (sizes as real: a gap per chunk), so that the file holds what a year of them would."""
        rows = []
        for c in self.y.levels:
            pool = self._pool.setdefault((profile, c), [])
            if len(pool) < 4:
                pool.append(self._level(profile, c))
            rows.append(self.rng.choice(pool))
        return rows

    def _level(self, profile: str, concurrency: int) -> LevelRow:
        per_token, chunk = 1.0 / RATE[profile], ACCEPT[profile]
        records, clock = [], 0.0
        for i in range(self.y.requests):
            chunks = max(1, round(self.y.max_tokens / chunk))
            gaps = [per_token * chunk * self.rng.uniform(0.7, 1.4) for _ in range(chunks - 1)]
            ttft = self.rng.uniform(0.05, 0.4)
            r = RequestRecord(index=i, sent=clock, prompt_tokens=self.rng.randint(100, 2000),
                              output_tokens=self.y.max_tokens, ttft=ttft, e2el=ttft + sum(gaps), gaps=gaps)  # fmt: skip
            records.append(r)
            clock += (r.e2el or 0.0) / concurrency
        summary = summarize(records, clock + (records[-1].e2el or 0.0))
        return LevelRow(concurrency, None, summary, [r.to_row() for r in records])

    def _switch(self, at: datetime, profile: str, previous: str | None, parent: int | None = None) -> int:
        with time_machine.travel(at, tick=False) as t:
            run = self.store.create_run(NewRun(RunKind.SWITCH, profile, previous, parent,
                                               ["vllm", "serve", f"/models/{profile}", "--port", "8000"],
                                               "0" * 64, f"k25-engine@{profile}.service", "0.12.0"))  # fmt: skip
            for i, phase in enumerate(PHASES):
                t.shift(timedelta(seconds=2 + i * 40))
                self.store.add_event(
                    run_id=run, phase=phase, detail=f"{phase} of {profile} (a realistic line)"
                )
            report = TeardownReport(shm_removed=["psm_1a2b"], steps={"signal": 0.4, "verify": 1.2})
            self.store.save_teardown(run_id=run, ok=True, report=report.to_dict())
            t.shift(timedelta(seconds=30))
            self.store.finish_run(run_id=run, outcome=Outcome.ACTIVE, load_seconds=290.0)
            self.out.runs += 1
            return run

    def _metrics(self, run: int, since: datetime, until: datetime) -> None:
        """What the retention leaves of a serving run's rows (see the module's docstring)."""
        minute_from, hour_from = self.end - timedelta(days=2), self.end - timedelta(days=92)
        t = max(since, hour_from)
        while t < until:
            step = timedelta(minutes=1) if t >= minute_from else timedelta(hours=1)
            seconds = step.total_seconds()
            row = ServingMetric(run_id=run, at=t, resolution="minute" if seconds == 60 else "hour", seconds=seconds,
                                requests=seconds * 0.5, prompt_tokens=seconds * 400, generation_tokens=seconds * 60,
                                tokens_per_s=60.0, running=3, waiting=0, kv_usage=0.4)  # fmt: skip
            self.serving.add_row(row)
            self.out.metric_rows += 1
            t += step

    def _experiment(self, at: datetime) -> datetime:
        a, b = self.rng.sample(PROFILES, 2)
        req = ExperimentRequest.model_validate(
            {
                "profiles": [a, b],
                "rounds": self.y.rounds,
                "benchmark": {
                    "concurrency": list(self.y.levels),
                    "num_prompts": self.y.requests,
                    "max_tokens": self.y.max_tokens,
                },
            }
        )
        spec = BenchmarkSpec.model_validate(req.benchmark.model_dump() | {"profile": None})
        with time_machine.travel(at, tick=False):
            exp = self.store.create_run(NewRun(RunKind.EXPERIMENT, None, a))
            plan = orders([a, b], self.y.rounds, seed=exp)
            self.bench.create_experiment(
                run_id=exp, request=req.model_dump() | {"restore_to": a, "orders": plan}
            )
        record, t = Record(orders=plan), at
        for r, order in enumerate(plan):
            for profile in order:
                t += timedelta(minutes=5)
                switch = self._switch(t, profile, None, parent=exp)
                t += timedelta(minutes=5)
                with time_machine.travel(t, tick=False) as clock:
                    run = self.store.create_run(NewRun(RunKind.BENCHMARK, profile, parent_id=exp))
                    levels = self._levels(profile)
                    first = levels[0].summary
                    self.bench.save(Benchmark(run_id=run, profile=profile, experiment_run_id=exp, round=r,
                                              spec=spec.model_dump_json(), spec_hash=spec.digest(), prompt_hash="p" * 16,
                                              provenance=json.dumps({"profile": profile, "engine": "vllm"}),
                                              gpu_key="8x NVIDIA H200", output_throughput=first.get("output_throughput")),
                                    levels)  # fmt: skip
                    clock.shift(timedelta(minutes=4))
                    self.store.finish_run(run_id=run, outcome=Outcome.OK)
                self.out.runs, self.out.benchmarks = self.out.runs + 1, self.out.benchmarks + 1
                self.out.levels += len(levels)
                self.out.request_records += sum(len(lv.requests) for lv in levels)
                record.steps.append(ExpStep(profile, r, switch, [run], [Outcome.OK]))
        t += timedelta(minutes=5)
        record.restore = Restore(a, self._switch(t, a, b, parent=exp), ok=True)
        record.verdicts = [f"{b} vs {a}: faster by 12% [8%, 16%]"]
        with time_machine.travel(t, tick=False):
            self.bench.set_steps(run_id=exp, steps=asdict(record))
            self.store.finish_run(run_id=exp, outcome=Outcome.OK, detail=record.verdicts[0])
        self.out.runs += 1
        return t

    def _captures(self, day: datetime) -> None:
        caps = Caps(100_000, 256 * 1024**2, 7 * 86400.0)
        new = [
            NewCapture(day.timestamp() + i * 86400 / self.y.captures, "completions", "kimi-k2.5", "chat",
                       json.dumps({"prompt": "a captured prompt " * self.rng.randint(5, 60), "max_tokens": 256}))
            for i in range(self.y.captures)
        ]  # fmt: skip
        for i in range(0, len(new), 500):
            self.captures.add(new[i : i + 500], caps, now=new[min(i + 499, len(new) - 1)].at)
        self.out.captures += len(new)

    def _dataset(self, at: datetime, n: int) -> None:
        prompts = [NewPrompt("completions", json.dumps({"prompt": f"prompt {i} " * 20, "params": {}}), "chat", 200, None)
                   for i in range(500)]  # fmt: skip
        head = Dataset(name=f"monthly-{n:02d}", source="capture", prompts=len(prompts), categories='{"chat": 500}',
                       sha256=f"{n:064d}", lengths="mean", output_mean=200.0)  # fmt: skip
        with time_machine.travel(at, tick=False):
            self.datasets.create(head, prompts)
        self.out.datasets += 1

    # -- the year ----------------------------------------------------------------------------------------

    def write(self, progress: bool = True) -> Written:
        serving: tuple[int, str, datetime] | None = None
        previous: str | None = None
        for day in range(self.y.days):
            d0 = self.start + timedelta(days=day)
            times = sorted(self.rng.uniform(0, 86400) for _ in range(self.y.switches))
            experiment_day = day % 7 < self.y.experiments
            for k, s in enumerate(times):
                at = d0 + timedelta(seconds=s)
                if serving is not None:
                    run, prof, since = serving
                    self._close(run, prof, since, at)
                if experiment_day and k == len(times) // 2:
                    at = self._experiment(at)
                profile = self.rng.choice([p for p in PROFILES if p != previous])
                self._switch(at, profile, previous)
                serving, previous = (self._serving_open(at, profile), profile, at), profile
            if self.y.days - day <= 7:
                self._captures(d0)
            if day % 30 == 29:
                self._dataset(d0, day // 30)
            if progress and day % 30 == 29:
                print(f"  day {day + 1}: {self.out}", flush=True)
        if serving is not None:
            self._close(*serving, self.end)
        return self.out

    def _serving_open(self, at: datetime, profile: str) -> int:
        with time_machine.travel(at + timedelta(minutes=5), tick=False):
            run = self.store.create_run(NewRun(RunKind.SERVING, profile))
        self.out.runs += 1
        return run

    def _close(self, run: int, profile: str, since: datetime, at: datetime) -> None:
        self._metrics(run, since, at)
        with time_machine.travel(at, tick=False):
            self.store.finish_run(run_id=run, outcome=Outcome.STOPPED, detail=f"{profile} switched away")
