"""The GPUs' health as the driver reports it: per-GPU readings (ECC, remapped rows, slowdowns, temperature,
power, PCIe link, NVLink, lost) and the driver's events (Xid, ECC). A field the GPU or driver does not
support reads None and is named in `unsupported`, never 0. Real readings come from NVML (nvml_health.py),
the sandbox's from files (sim_health.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

# The readings, by name (GET /gpus, the metrics and the docs use these names).
ECC_FIELDS = (
    "ecc_volatile_corrected",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
)
REMAP_FIELDS = ("remapped_correctable", "remapped_uncorrectable", "remap_pending", "remap_failure")
LINK_FIELDS = (
    "pcie_gen",
    "pcie_gen_max",
    "pcie_width",
    "pcie_width_max",
    "nvlink_up",
    "nvlink_links",
    "nvlink_errors",
)
FIELDS = (*ECC_FIELDS, *REMAP_FIELDS, "temperature_c", "power_w", *LINK_FIELDS)

Value = int | float | bool


@dataclass(frozen=True)
class HealthReading:
    index: int
    bus_id: str  # NVML's form, lower case: 00000000:3b:00.0 (the kernel log's Xid lines name it)
    uuid: str
    values: Mapping[str, Value | None] = field(default_factory=dict)  # None: not supported here
    slowdowns: tuple[str, ...] | None = ()  # active clock event reasons that slow the GPU; None: unsupported
    lost: bool = False  # NVML says the GPU is lost (fell off the bus): nothing else can be read
    error: str | None = None  # a read that failed for another reason

    @property
    def unsupported(self) -> tuple[str, ...]:
        names = tuple(k for k in FIELDS if self.values.get(k) is None)
        return names if self.slowdowns is not None else (*names, "slowdowns")


@dataclass(frozen=True)
class DriverEvent:
    """One event the driver reported: an Xid (code > 0) or an ECC event (code 0, `kind` says which)."""

    at: float  # epoch seconds
    source: str  # "nvml" | "kernel"
    code: int
    gpu: int | None  # the GPU's index, where the event names it
    bus_id: str | None = None
    pid: int | None = None
    message: str = ""
    kind: str = "xid"  # xid | ecc_single | ecc_double


def bus_id(text: str) -> str:
    """A PCI address as NVML writes it: `00000000:3b:00.0`."""
    parts = text.lower().split(":")
    domain, bus, rest = parts[0].rjust(8, "0")[-8:], parts[1], parts[2]
    device, _, function = rest.partition(".")
    return f"{domain}:{bus}:{device}.{function or '0'}"


class GpuHealthPort(Protocol):
    def read(self) -> list[HealthReading]: ...

    def events(self, timeout_s: float) -> list[DriverEvent]:
        """Blocks up to `timeout_s` for the driver's next events (NVML's event set); [] on timeout."""
        ...

    def registration(self) -> str:
        """What the event source could register for, in words (the driver may refuse event types)."""
        ...

    def close(self) -> None:
        """Frees the event source; called on the thread that waits, after its last wait."""
        ...


class NoHealth:
    """A host without GPUs: nothing to read, no events (each wait still waits, so callers never spin)."""

    def __init__(self) -> None:
        import threading

        self._closed = threading.Event()

    def read(self) -> list[HealthReading]:
        return []

    def events(self, timeout_s: float) -> list[DriverEvent]:
        self._closed.wait(timeout_s)
        return []

    def registration(self) -> str:
        return "no GPUs"

    def close(self) -> None:
        self._closed.set()
