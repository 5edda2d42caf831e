"""The Prometheus exporter (GET /metrics): the host's state, runs, durations and GPU memory
(prometheus_client)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from daemon.core.hoststate import HostState, StateHub
from daemon.store.queries import Store
from daemon.store.switch_cost import DOWNTIME_BUCKETS, SwitchCostStore

if TYPE_CHECKING:
    from daemon.serving.serving_run import ServingNow
    from daemon.status.sampler import HostSampler


class K25Collector:
    def __init__(
        self,
        hub: StateHub,
        store: Store,
        sampler: HostSampler,
        serving: Callable[[], ServingNow | None],
        cost: SwitchCostStore,
    ) -> None:
        self.hub, self.store, self.sampler, self.serving, self.cost = hub, store, sampler, serving, cost

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
        summary = self.store.metrics_summary()
        runs = CounterMetricFamily("k25_runs", "runs by kind and outcome", labels=["kind", "outcome"])
        for (kind, outcome), n in sorted(summary.counts.items()):
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
        td = GaugeMetricFamily("k25_teardown_duration_seconds", "duration of the last teardown")
        if summary.teardown_seconds is not None:
            td.add_metric([], float(summary.teardown_seconds))
        yield td
        yield from self._serving()
        used = GaugeMetricFamily("k25_gpu_memory_used_mib", "GPU memory in use", labels=["gpu"])
        total = GaugeMetricFamily("k25_gpu_memory_total_mib", "GPU memory", labels=["gpu"])
        gpus = self.sampler.gpus  # the shared sample: a scrape never reads NVML itself
        readable = GaugeMetricFamily("k25_gpu_readable", "1 when the GPUs could be read (NVML)")
        readable.add_metric([], 0.0 if self.sampler.gpu_error else 1.0)
        yield readable
        for gpu in gpus:
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

    def _parked(self) -> Iterator[Metric]:
        parked = GaugeMetricFamily("k25_parked", "1 for each parked (sleeping) profile", labels=["profile"])
        ram = GaugeMetricFamily("k25_parked_host_ram_bytes", "host RAM a parked profile's weights hold",
                                labels=["profile"])  # fmt: skip
        gpu = GaugeMetricFamily("k25_parked_gpu_memory_mib", "GPU memory a parked profile still holds",
                                labels=["profile", "gpu"])  # fmt: skip
        for p in self.hub.status.parked:
            parked.add_metric([p.profile], 1.0)
            ram.add_metric([p.profile], float(p.host_ram_bytes))
            for index, mib in sorted(p.gpu_mib.items()):
                gpu.add_metric([p.profile, str(index)], float(mib))
        yield from (parked, ram, gpu)


def render(collector: K25Collector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return bytes(generate_latest(registry))
