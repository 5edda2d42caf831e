"""What a park and a wake cost on this host, predicted from measured rates (pure). The cost of a level-1
park is not the copy but the pinning: vLLM backs each worker's share of the weights up into a freshly
pinned tensor at its first sleep, and torch keeps that block in the process afterwards, so a later park of
the same process is the copy alone (vllm#16663). Level 2 pins nothing and reloads the weights at the wake:
from the page cache where the files are resident, from disk where not (docs/engines.md, "Parking: what it
costs on the host").

Rates are GiB/s. Pinning is per process with a host-wide ceiling (an engine's workers pin at once);
copies run per GPU, each GPU on its own link; a reload from the page cache runs per GPU too, one from disk is
bounded by the disk."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime

from daemon.core.profiles import Profile

GIB = 1024**3


@dataclass(frozen=True)
class HostRates:
    """The host's rates (GiB/s). `measured_at` None: the documented defaults (an H200 host, torch 2.11)."""

    pin_process: float  # one process pinning with torch's default pinned allocator (cudaHostAlloc)
    pin_host: float  # the host's ceiling for many processes pinning at once, default allocator
    pin_process_registered: float  # the same with pinned_use_cuda_host_register (k25-ctl's rendering)
    pin_host_registered: float
    device_to_host: float  # a GPU's copy into pinned host memory (per GPU)
    host_to_device: float  # pinned host memory into a GPU (per GPU)
    page_cache: float  # resident weight files into a GPU (per GPU)
    disk: float  # weight files from a cold disk into the GPUs (the disk's, host-wide)
    measured_at: datetime | None = None
    # Each rate's lowest and highest over the calibration's repeats (empty: one reading, or the defaults).
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    def pin(self, processes: int, registered: bool) -> float:
        """The aggregate pin rate of `processes` pinning at once."""
        one, ceiling = (
            (self.pin_process_registered, self.pin_host_registered)
            if registered
            else (self.pin_process, self.pin_host)
        )
        return min(processes * one, ceiling)

    def end(self, fast: bool) -> HostRates:
        """The rates at their range's fast (or slow) end: the predictions' other bounds."""
        pick = 1 if fast else 0
        ends = {k: pair[pick] for k, pair in self.ranges.items()}
        return replace(self, **ends, ranges={})  # type: ignore[arg-type]

    @classmethod
    def of(
        cls,
        measured: Mapping[str, float],
        measured_at: datetime | None = None,
        ranges: Mapping[str, tuple[float, float]] | None = None,
    ) -> HostRates:
        """The rates a measurement gave (calibrate_torch.py's keys), with their ranges where repeated."""
        return cls(
            pin_process=measured["pin_process"],
            pin_host=measured["pin_host"],
            pin_process_registered=measured["pin_process_registered"],
            pin_host_registered=measured["pin_host_registered"],
            device_to_host=measured["device_to_host"],
            host_to_device=measured["host_to_device"],
            page_cache=measured["page_cache"],
            disk=measured["disk"],
            measured_at=measured_at,
            ranges=dict(ranges or {}),
        )

    def as_json(self) -> dict[str, object]:
        at = self.measured_at.isoformat() if self.measured_at else None
        return asdict(self) | {"measured_at": at, "ranges": {k: list(v) for k, v in self.ranges.items()}}


# Measured on an H200 host (docs/engines.md): one process 1.8 GiB/s by default, 8.1 registered with 8
# threads; eight at once 10.3 by default, 14.1-14.7 registered; copies 51 GiB/s out and ~47 in; a hot page
# cache 7.1 GB/s into one GPU, a cold disk 1.6 GB/s.
DEFAULT_RATES = HostRates(
    pin_process=1.8,
    pin_host=10.3,
    pin_process_registered=8.1,
    pin_host_registered=14.4,
    device_to_host=51.0,
    host_to_device=46.6,
    page_cache=6.6,
    disk=1.5,
)


@dataclass(frozen=True)
class Shape:
    """What is parked: the weights' bytes, the engine's worker processes and the GPUs they are spread on."""

    weight_bytes: int
    workers: int
    gpus: int

    @classmethod
    def of(cls, p: Profile, weight_bytes: int) -> Shape:
        """A profile's shape: its tensor-parallel workers on its GPUs."""
        return cls(weight_bytes, workers=p.tensor_parallel_size, gpus=len(p.gpus))

    def per_gpu_gib(self) -> float:
        return self.weight_bytes / GIB / max(1, self.gpus)


@dataclass(frozen=True)
class Way:
    """One way to park and wake: seconds of each, and the host RAM it holds while parked. The ranges: the
    seconds at the calibrated rates' fast and slow ends (the point figures where the rates have none)."""

    name: str
    park_s: float
    wake_s: float
    ram_bytes: int
    park_range: tuple[float, float] | None = None
    wake_range: tuple[float, float] | None = None

    def range_of(self, wake: bool) -> tuple[float, float]:
        seconds = self.wake_s if wake else self.park_s
        return (self.wake_range if wake else self.park_range) or (seconds, seconds)


def spread(make: Callable[[HostRates], Way], rates: HostRates) -> Way:
    """A way predicted at the rates' medians, with the seconds their ranges imply."""
    way, fast, slow = make(rates), make(rates.end(fast=True)), make(rates.end(fast=False))
    return replace(
        way,
        park_range=(min(fast.park_s, slow.park_s), max(fast.park_s, slow.park_s)),
        wake_range=(min(fast.wake_s, slow.wake_s), max(fast.wake_s, slow.wake_s)),
    )


def level1_first(shape: Shape, rates: HostRates, *, registered: bool) -> Way:
    """A process's first park: every worker pins its share at once, then copies it out."""
    pin = shape.weight_bytes / GIB / rates.pin(shape.workers, registered)
    copy = shape.per_gpu_gib() / rates.device_to_host
    name = "level 1, first park" + (" (registered pinning)" if registered else " (default pinning)")
    return Way(name, pin + copy, shape.per_gpu_gib() / rates.host_to_device, shape.weight_bytes)


def level1_again(shape: Shape, rates: HostRates) -> Way:
    """A later park of the same process: torch kept the pinned block, so only the copy."""
    copy = shape.per_gpu_gib() / rates.device_to_host
    return Way("level 1, later park", copy, shape.per_gpu_gib() / rates.host_to_device, shape.weight_bytes)


def level2(shape: Shape, rates: HostRates, *, resident: float) -> Way:
    """Drop the weights; the wake reloads them: the resident share from the page cache (per GPU), the
    rest from disk (the disk's rate, shared by every GPU). Nothing is pinned."""
    cached = resident * shape.per_gpu_gib() / rates.page_cache
    cold = (1.0 - resident) * shape.weight_bytes / GIB / rates.disk
    where = "page cache" if resident >= 1.0 else f"{resident:.0%} resident"
    return Way(f"level 2, reload from {where}", 0.0, cached + cold, 0)


def ways(shape: Shape, rates: HostRates, *, resident: float) -> list[Way]:
    """Each way to park this shape on this host, as the cost table shows them, with their ranges."""
    makes: list[Callable[[HostRates], Way]] = [
        lambda r: level1_first(shape, r, registered=False),
        lambda r: level1_first(shape, r, registered=True),
        lambda r: level1_again(shape, r),
        lambda r: level2(shape, r, resident=resident),
    ]
    return [spread(make, rates) for make in makes]
