"""The Prometheus exporter (GET /metrics): the host's state, runs, durations and GPU memory
(prometheus_client)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from daemon.core.hoststate import HostState, HostStatus, StateHub
from daemon.engines.load_stages import segments
from daemon.store.queries import Store
from daemon.store.summary import MetricsSummary
from daemon.store.switch_cost import DOWNTIME_BUCKETS, SwitchCostStore

if TYPE_CHECKING:
    from daemon.serving.serving_run import ServingNow
    from daemon.status.sampler import HostSampler


ALERTED_RUNS = {("serving", "crashed"): 0, ("warm", "failed"): 0}


class K25Collector:
    def __init__(
        self,
        hub: StateHub,
        store: Store,
        sampler: HostSampler,
        serving: Callable[[], ServingNow | None],
        cost: SwitchCostStore,
        restart_budget: Callable[[], dict[str, int]],
        bench_throughput: Callable[[], dict[str, float]],
        relative_throughput: Callable[[], dict[str, float]],
        more: tuple[Callable[[], Iterator[Metric]], ...] = (),
    ) -> None:
        self.hub = hub
        self.store = store
        self.sampler = sampler
        self.serving = serving
        self.cost = cost
        self.restart_budget = restart_budget
        self.bench_throughput = bench_throughput
        self.relative_throughput = relative_throughput
        self.more = more  # other capabilities' families (the GPUs' health)

    def collect(self) -> Iterator[Metric]:
        st = self.hub.status
        state = GaugeMetricFamily("k25_host_state", "1 for the host's current state", labels=["state"])
        for s in HostState:
            state.add_metric([s.value], 1.0 if st.state is s else 0.0)
        yield state
        active = GaugeMetricFamily("k25_active_profile", "1 for the profile that serves", labels=["profile"])
        if st.active_profile:
            active.add_metric([st.active_profile], 1.0)
        yield active
        progress = GaugeMetricFamily("k25_load_progress_percent", "load progress of the switch in progress")
        progress.add_metric([], float(st.progress_percent or 0) if st.state is HostState.SWITCHING else 0.0)
        yield progress
        yield from self._parked()
        yield from self._alerting(st)
        summary = self.store.metrics_summary()
        runs = CounterMetricFamily("k25_runs", "runs by kind and outcome", labels=["kind", "outcome"])
        # The alerts' counters exist from the start at 0: a series born at 1 shows no increase().
        for (kind, outcome), n in sorted((ALERTED_RUNS | summary.counts).items()):
            runs.add_metric([kind, outcome], float(n))
        yield runs
        for name, values, doc in (
            ("k25_load_seconds", summary.load_seconds, "engine load time of the profile's last good switch"),
            (
                "k25_switch_duration_seconds",
                summary.switch_seconds,
                "duration of the profile's last good switch",
            ),
        ):
            g = GaugeMetricFamily(name, doc, labels=["profile"])
            for profile, v in sorted(values.items()):
                g.add_metric([profile], v)
            yield g
        yield from self._switch_cost()
        for families in self.more:
            yield from families()
        yield from self._loads(summary)
        yield from self._teardown(summary)
        bench = GaugeMetricFamily(
            "k25_benchmark_output_throughput",
            "newest benchmark's output tok/s (first level)",
            labels=["profile"],
        )
        for profile, tps in sorted(self.bench_throughput().items()):
            bench.add_metric([profile], tps)
        yield bench
        relative = GaugeMetricFamily(
            "k25_host_relative_throughput",
            "newest benchmark's output tok/s over the median of this host's last 5 of the same measurement",
            labels=["profile"],
        )
        for profile, ratio in sorted(self.relative_throughput().items()):
            relative.add_metric([profile], ratio)
        yield relative
        yield from self._serving()
        yield from self._gpus()

    @staticmethod
    def _teardown(summary: MetricsSummary) -> Iterator[Metric]:
        td = GaugeMetricFamily("k25_teardown_duration_seconds", "duration of the last teardown")
        if summary.teardown_seconds is not None:
            td.add_metric([], float(summary.teardown_seconds))
        yield td
        clean = GaugeMetricFamily("k25_teardown_clean", "1 when the last teardown verified the GPUs clean")
        if summary.teardown_ok is not None:
            clean.add_metric([], 1.0 if summary.teardown_ok else 0.0)
        yield clean

    def _gpus(self) -> Iterator[Metric]:
        """From the shared sample: a scrape never reads NVML itself."""
        used = GaugeMetricFamily("k25_gpu_memory_used_mib", "GPU memory in use", labels=["gpu"])
        total = GaugeMetricFamily("k25_gpu_memory_total_mib", "GPU memory", labels=["gpu"])
        readable = GaugeMetricFamily("k25_gpu_readable", "1 when the GPUs could be read (NVML)")
        readable.add_metric([], 0.0 if self.sampler.gpu_error else 1.0)
        yield readable
        for gpu in self.sampler.gpus:
            used.add_metric([str(gpu.index)], float(gpu.memory_used_mib))
            total.add_metric([str(gpu.index)], float(gpu.memory_total_mib))
        yield used
        yield total

    def _switch_cost(self) -> Iterator[Metric]:
        """What switches cost the clients: downtime as a balancer saw it, requests a stop cut."""
        cost = self.cost.summary()
        bounds = [(f"{b:g}", float(n)) for b, n in zip(DOWNTIME_BUCKETS, cost.buckets, strict=True)]
        hist = HistogramMetricFamily("k25_switch_downtime_seconds", "out of rotation (/ready 503) per switch")
        hist.add_metric([], [*bounds, ("+Inf", float(cost.count))], sum_value=cost.total_s)
        yield hist
        cut = CounterMetricFamily("k25_drain_cut_requests", "requests still in flight when an engine stopped")
        cut.add_metric([], float(cost.cut))
        yield cut

    def _serving(self) -> Iterator[Metric]:
        """The serving engine's current figures, labelled with its profile."""
        now = self.serving()
        for name, attr, doc in (
            ("k25_serving_tokens_per_second", "tokens_per_s", "generated tokens per second (last interval)"),
            ("k25_serving_acceptance_length", "acceptance_length", "mean acceptance length (last interval)"),
            (
                "k25_serving_acceptance_rate",
                "acceptance_rate",
                "accepted / proposed draft tokens (last interval)",
            ),
            ("k25_serving_running_requests", "running", "requests the engine is running"),
            ("k25_serving_waiting_requests", "waiting", "requests waiting in the engine"),
            ("k25_serving_kv_cache_usage", "kv_usage", "KV cache usage (0..1)"),
            ("k25_serving_seconds", "served_s", "how long the active profile has served"),
        ):
            g = GaugeMetricFamily(name, doc, labels=["profile"])
            value = getattr(now, attr) if now is not None else None
            if now is not None and value is not None:
                g.add_metric([now.profile], float(value))
            yield g

    def _alerting(self, st: HostStatus) -> Iterator[Metric]:
        """What the alert rules need beyond the state: a switch's age, warnings, the restart budget."""
        elapsed = GaugeMetricFamily(
            "k25_switch_elapsed_seconds", "how long the switch in progress has run", labels=["profile"]
        )
        if st.state is HostState.SWITCHING and st.target_profile:
            elapsed.add_metric([st.target_profile], max(0.0, time.time() - st.since))
        yield elapsed
        warnings = GaugeMetricFamily("k25_status_warnings", "warnings /status shows (whatever the state)")
        warnings.add_metric([], float(len(st.warnings)))
        yield warnings
        moved = GaugeMetricFamily(
            "k25_database_moved_aside",
            "1 when the runs database was unreadable at start and moved aside (history starts anew)",
        )
        moved.add_metric([], 1.0 if self.store.recovered else 0.0)
        yield moved
        budget = GaugeMetricFamily(
            "k25_restart_budget_remaining",
            "automatic restarts a profile may still take this hour (restart_limit_per_hour)",
            labels=["profile"],
        )
        for profile, left in sorted(self.restart_budget().items()):
            budget.add_metric([profile], float(left))
        yield budget

    def _loads(self, summary: MetricsSummary) -> Iterator[Metric]:
        """Each profile's last good load in disjoint pieces (weights, compile, graphs...), as on the page."""
        pieces = GaugeMetricFamily(
            "k25_load_stage_seconds",
            "the profile's last good load, piece by piece",
            labels=["profile", "stage"],
        )
        for profile, stages in sorted(summary.load_stages.items()):
            for stage, seconds in segments(stages, summary.load_seconds.get(profile)):
                pieces.add_metric([profile, stage], seconds)
        yield pieces

    def _parked(self) -> Iterator[Metric]:
        parked = GaugeMetricFamily("k25_parked", "1 for each parked (sleeping) profile", labels=["profile"])
        ram = GaugeMetricFamily(
            "k25_parked_host_ram_bytes", "host RAM a parked profile's weights hold", labels=["profile"]
        )
        gpu = GaugeMetricFamily(
            "k25_parked_gpu_memory_mib", "GPU memory a parked profile still holds", labels=["profile", "gpu"]
        )
        held = GaugeMetricFamily(
            "k25_engine_host_ram_bytes",
            "host RAM an engine's processes hold (the RAM ledger; parked: 1 while it sleeps)",
            labels=["profile", "parked"],
        )
        for h in self.hub.status.ram_held:
            held.add_metric([h.profile, "1" if h.parked else "0"], float(h.bytes))
        yield held
        for p in self.hub.status.parked:
            parked.add_metric([p.profile], 1.0)
            ram.add_metric([p.profile], float(p.host_ram_bytes))
            for index, mib in sorted(p.gpu_mib.items()):
                gpu.add_metric([p.profile, str(index)], float(mib))
        budget = self.hub.status.park_budget
        yield GaugeMetricFamily(
            "k25_park_ram_budget_bytes",
            "host RAM parked engines may pin (park_ram_budget_bytes)",
            value=float(budget.budget_bytes),
        )
        yield GaugeMetricFamily(
            "k25_park_ram_pinned_bytes", "host RAM the parked engines pin now", value=float(budget.used_bytes)
        )
        yield from (parked, ram, gpu)


def render(collector: K25Collector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return bytes(generate_latest(registry))
