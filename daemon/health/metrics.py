"""The GPUs' health for Prometheus (from the watch's state; a reading a GPU does not support has no
series, never a 0): the state, Xids by code, ECC errors, remapped rows, slowdowns, the links."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from daemon.health.assess import Health
from daemon.health.watch import HealthWatch
from daemon.host.nvml_health import SLOWDOWN_BITS


def _gauge(name: str, doc: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def gpu_health_metrics(h: HealthWatch) -> Iterator[Metric]:
    state = _gauge("k25_gpu_health", "1 for each GPU's health state", "gpu", "state")
    for gpu, (now, _) in sorted(h.states.items()):
        for s in Health:
            state.add_metric([str(gpu), s.value], 1.0 if s is now else 0.0)
    yield state
    xids = CounterMetricFamily("k25_gpu_xid", "Xid events by GPU and code", labels=["gpu", "xid"])
    for (gpu, code), n in sorted(h.xids.items()):
        xids.add_metric([str(gpu), str(code)], float(n))
    yield xids
    ecc = _gauge("k25_gpu_ecc_errors", "ECC error counts (NVML)", "gpu", "counter", "type")
    rows = _gauge("k25_gpu_remapped_rows", "remapped memory rows", "gpu", "kind")
    pending = _gauge("k25_gpu_remap_pending", "1 while a row remap waits for a reset", "gpu")
    slow = _gauge("k25_gpu_slowdown", "1 for each active slowdown reason", "gpu", "reason")
    lost = _gauge("k25_gpu_lost", "1 while NVML reports the GPU lost", "gpu")
    plain = {
        "temperature_c": _gauge("k25_gpu_temperature_celsius", "GPU temperature", "gpu"),
        "pcie_width": _gauge("k25_gpu_pcie_width", "PCIe link width now", "gpu"),
        "pcie_width_max": _gauge("k25_gpu_pcie_width_max", "PCIe link width at most", "gpu"),
        "nvlink_up": _gauge("k25_gpu_nvlink_links_up", "NVLink links up", "gpu"),
    }
    for r in sorted(h.readings.values(), key=lambda r: r.index):
        g = str(r.index)
        lost.add_metric([g], 1.0 if r.lost else 0.0)
        for counter in ("volatile", "aggregate"):
            for kind in ("corrected", "uncorrected"):
                if isinstance(v := r.values.get(f"ecc_{counter}_{kind}"), int):
                    ecc.add_metric([g, counter, kind], float(v))
        for kind in ("correctable", "uncorrectable"):
            if isinstance(v := r.values.get(f"remapped_{kind}"), int):
                rows.add_metric([g, kind], float(v))
        if isinstance(v := r.values.get("remap_pending"), bool):
            pending.add_metric([g], float(v))
        if r.slowdowns is not None:
            for reason in SLOWDOWN_BITS.values():
                slow.add_metric([g, reason], 1.0 if reason in r.slowdowns else 0.0)
        for name, family in plain.items():
            if isinstance(v := r.values.get(name), int | float) and not isinstance(v, bool):
                family.add_metric([g], float(v))
    yield from (ecc, rows, pending, slow, lost, *plain.values())
