"""The sandbox's GPU health: simulated GPUs read as healthy H200s unless a file says otherwise, and the
driver's events arrive through a FIFO, as NVML's event set delivers them (a blocking wait, no polling).

    <dir>/gpu<N>.json   {"values": {"ecc_volatile_corrected": 3, ...}, "slowdowns": ["hw_thermal"],
                         "lost": false}   (any key may be left out; the healthy default stands)
    <dir>/events        FIFO of JSON lines {"gpu": 3, "code": 79, "kind": "xid", "pid": 1234}

The sandbox's fault injector (k25_sandbox/gpu_faults.py) writes both; the kernel-log path is the journal."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import threading
import time
from pathlib import Path

from daemon.host.gpu_health import DriverEvent, HealthReading, Value

# An HGX H200 board's bus ids, in NVML's index order.
BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
HEALTHY: dict[str, Value | None] = {
    "ecc_volatile_corrected": 0,
    "ecc_volatile_uncorrected": 0,
    "ecc_aggregate_corrected": 0,
    "ecc_aggregate_uncorrected": 0,
    "remapped_correctable": 0,
    "remapped_uncorrectable": 0,
    "remap_pending": False,
    "remap_failure": False,
    "temperature_c": 41,
    "power_w": 75.0,
    "pcie_gen": 5,
    "pcie_gen_max": 5,
    "pcie_width": 16,
    "pcie_width_max": 16,
    "nvlink_up": 18,
    "nvlink_links": 18,
    "nvlink_errors": 0,
}
EVENTS = "events"


def sim_bus_id(index: int) -> str:
    return f"00000000:{BUS_IDS[index % len(BUS_IDS)]}:00.0"


class SimulatedHealth:
    def __init__(self, directory: Path, count: int) -> None:
        self.dir = directory
        self.count = count
        self._fd: int | None = None
        self._keep: int | None = None  # our own writer end: the FIFO never reads EOF between injections
        self._buf = b""
        self._closed = threading.Event()

    def read(self) -> list[HealthReading]:
        return [self._one(i) for i in range(self.count)]

    def _one(self, i: int) -> HealthReading:
        try:
            fault = json.loads((self.dir / f"gpu{i}.json").read_text())
        except (OSError, ValueError):
            fault = {}
        if fault.get("lost"):
            return HealthReading(i, sim_bus_id(i), f"GPU-sim-{i:04d}", lost=True)
        values = HEALTHY | {k: v for k, v in fault.get("values", {}).items() if k in HEALTHY}
        slowdowns = tuple(fault.get("slowdowns", ()))
        return HealthReading(i, sim_bus_id(i), f"GPU-sim-{i:04d}", values, slowdowns)

    def _open(self) -> int | None:
        if self._fd is None:
            fifo = self.dir / EVENTS
            with contextlib.suppress(FileExistsError, FileNotFoundError):
                os.mkfifo(fifo, 0o600)
            try:
                self._fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
                self._keep = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return None
        return self._fd

    def registration(self) -> str:
        return "simulated: xid, ecc_double, ecc_single (a FIFO)" if self._open() is not None else "no FIFO"

    def events(self, timeout_s: float) -> list[DriverEvent]:
        fd = self._open()
        if fd is None or self._closed.is_set():
            self._closed.wait(timeout_s)
            return []
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if not ready:
            return []
        try:
            self._buf += os.read(fd, 65536)
        except OSError as e:
            if e.errno != errno.EAGAIN:
                raise
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for line in lines:
            try:
                fault = json.loads(line)
            except ValueError:
                continue
            kind = str(fault.get("kind", "xid"))
            out.append(
                DriverEvent(
                    time.time(),
                    "nvml",
                    int(fault.get("code", 0)),
                    int(fault["gpu"]) if "gpu" in fault else None,
                    pid=fault.get("pid"),
                    kind=kind,
                    message=f"NVML event {kind}",
                )
            )
        return out

    def close(self) -> None:
        self._closed.set()
        for fd in (self._fd, self._keep):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._fd = self._keep = None
