"""A benchmark against the host's own normal: its output throughput over the median of the same
measurement's last few runs on this host (same profile, spec and traffic; ended ok). Comparing a host with
itself cancels what differs between hosts (GPU model, clocks, cooling), so a ratio well below 1 says this
host came back slower: a GPU missing, throttling, a bad driver. The median holds against one odd run; a
host that stays slow becomes its own normal after about half the window, so the alert on it fires early."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from daemon.store.bench import BenchStore
from daemon.store.models import Benchmark

WINDOW = 5  # earlier benchmarks whose median is the host's normal


@dataclass(frozen=True)
class Relative:
    run_id: int
    throughput: float  # this benchmark's output tok/s (first level)
    baseline: float  # the median of up to WINDOW earlier ones
    baseline_runs: int
    ratio: float


class RelativeThroughput:
    """Ratios for the API (one benchmark) and the exporter (each profile's newest, kept until a benchmark
    is saved or its run ends)."""

    def __init__(self, store: BenchStore) -> None:
        self.store = store
        self._newest: tuple[int, dict[str, Relative]] | None = None

    def of(self, bench: Benchmark) -> Relative | None:
        """None: no throughput, or nothing earlier to compare with (the first of its kind)."""
        if bench.output_throughput is None:
            return None
        earlier = self.store.earlier_throughputs(bench, WINDOW)
        if not earlier:
            return None
        base = statistics.median(earlier)
        ratio = bench.output_throughput / base if base > 0 else 0.0
        return Relative(bench.run_id, bench.output_throughput, base, len(earlier), ratio)

    def newest(self) -> dict[str, Relative]:
        """Each profile's newest benchmark against the host's normal (profiles with one benchmark: none)."""
        if self._newest is None or self._newest[0] != self.store.changes:
            changes = self.store.changes
            found = {b.profile: r for b in self.store.newest_each() if (r := self.of(b)) is not None}
            self._newest = (changes, found)
        return dict(self._newest[1])


def gate_verdict(relative: Relative | None, min_relative: float, require_normal: bool) -> tuple[bool, str]:
    """(passed, why) of a gate benchmark against the host's normal."""
    if relative is None:
        why = (
            "the first benchmark of its kind on this host: nothing to compare with yet (the normal is per "
            "profile, benchmark spec and whether other clients were served while it ran)"
        )
        return (False, why + "; the gate requires a normal") if require_normal else (True, why)
    said = (
        f"{relative.throughput:.1f} tok/s, {relative.ratio:.0%} of this host's normal "
        f"{relative.baseline:.1f} tok/s (median of {relative.baseline_runs} runs); "
        f"the gate asks for {min_relative:.0%}"
    )
    return relative.ratio >= min_relative, said
