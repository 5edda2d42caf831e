"""The Prometheus exporter (GET /metrics): the host's state, runs, durations and GPU memory
(prometheus_client)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from daemon.host.gpu import GpuUnavailable, GpuView
from daemon.hoststate import HostState, StateHub
from daemon.store.queries import Store


class K25Collector:
    def __init__(self, hub: StateHub, store: Store, gpus: GpuView) -> None:
        self.hub, self.store, self.gpus = hub, store, gpus

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
        td = GaugeMetricFamily("k25_teardown_duration_seconds", "duration of the last teardown")
        if summary.teardown_seconds is not None:
            td.add_metric([], float(summary.teardown_seconds))
        yield td
        used = GaugeMetricFamily("k25_gpu_memory_used_mib", "GPU memory in use", labels=["gpu"])
        total = GaugeMetricFamily("k25_gpu_memory_total_mib", "GPU memory", labels=["gpu"])
        try:
            gpus = self.gpus.gpus(light=True)
        except GpuUnavailable:
            gpus = []  # the scrape goes on; k25_gpu_readable says why the GPU series are missing
        readable = GaugeMetricFamily("k25_gpu_readable", "1 when the GPUs could be read (NVML)")
        readable.add_metric([], 1.0 if gpus or not self.gpus.required else 0.0)
        yield readable
        for gpu in gpus:
            used.add_metric([str(gpu.index)], float(gpu.memory_used_mib))
            total.add_metric([str(gpu.index)], float(gpu.memory_total_mib))
        yield used
        yield total


def render(collector: K25Collector) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return bytes(generate_latest(registry))
