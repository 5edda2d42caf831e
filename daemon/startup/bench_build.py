"""The benchmark side of the daemon built: the runner, sweeps, experiments, schedules and their
controller."""

from __future__ import annotations

from daemon.api.controllers.bench import BenchController
from daemon.core.command import k25_command
from daemon.datasets.service import Datasets
from daemon.experiments.comparison_read import Judging
from daemon.experiments.service import Experiments
from daemon.experiments.sweep.service import Sweeps
from daemon.experiments.timers import Schedules
from daemon.measure.relative import RelativeThroughput
from daemon.measure.runner import BenchmarkRunner
from daemon.proving.known_answer import KnownAnswers
from daemon.serving.watch import ServingWatch
from daemon.startup.basics import Basics
from daemon.startup.machine import hardware
from daemon.store.bench import BenchStore
from daemon.switching.transaction import Switcher
from daemon.warming.service import WarmService


def build_bench(
    b: Basics,
    switcher: Switcher,
    warms: WarmService,
    watch: ServingWatch,
    answers: KnownAnswers,
    datasets: Datasets,
) -> BenchController:
    s, recorder = b.s, b.recorder
    bench_store = BenchStore(recorder.store)
    runner = BenchmarkRunner(
        recorder=recorder,
        bench_store=bench_store,
        http=b.host.bench_http,
        hardware=hardware(b.host.gpus),
        datasets=datasets.replay,
        slos=b.s.slos,
    )
    sweeps = Sweeps(
        bench_store=bench_store,
        profiles=b.inventory.reload_profiles,
        variants=b.inventory,
        profiles_path=s.profiles_path,
        max_variants=s.max_variants,
        check_paths=s.check_model_paths,
        service_port=s.service_port,
    )
    judging = Judging(bench_store=bench_store)
    experiments = Experiments(
        runner=runner,
        judging=judging,
        jobs=b.jobs,
        recorder=recorder,
        switcher=switcher,
        profiles=b.inventory.reload_profiles,
        bench_store=bench_store,
        default_profile=s.default_profile,
        sweeps=sweeps,
        warm=warms.start,
    )
    schedules = Schedules(
        timers=b.host.timers,
        folder=s.state_dir / "schedules",
        command=k25_command(),
        benchmarks=experiments,
        recorder=recorder,
        jobs=b.jobs,
        running_now=lambda: now.running if (now := watch.now()) else None,
    )
    return BenchController(
        experiments=experiments,
        judging=judging,
        schedules=schedules,
        answers=answers,
        bench_store=bench_store,
        relative=RelativeThroughput(bench_store),
        store=recorder.store,
    )
