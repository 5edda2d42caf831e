"""What `k25-ctl doctor` reads of the machine besides the health readings: the driver and CUDA versions,
each GPU's persistence, ECC and MIG modes (NVML), the size of /dev/shm, and whether the kernel's clock is
synchronized (adjtimex: TIME_ERROR means not). The sandbox's simulated GPUs read their modes from
`<health dir>/host.json`, so a test can break one."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from daemon.host.gpu import NvmlGpus, nvml_optional, nvml_text

TIME_ERROR = 5  # adjtimex's answer when the clock is not synchronized (man 2 adjtimex)


@dataclass(frozen=True)
class GpuModes:
    index: int
    persistence: bool | None
    ecc: bool | None  # ECC on now
    ecc_pending: bool | None  # ECC on after the next reset
    mig: bool | None  # MIG mode on now


@dataclass(frozen=True)
class DriverFacts:
    driver: str | None
    cuda: str | None  # the highest CUDA version the driver supports, e.g. 12.8
    gpus: tuple[GpuModes, ...]
    error: str | None = None


class HostFacts(Protocol):
    def driver(self) -> DriverFacts: ...
    def shm_bytes(self, path: Path) -> int | None: ...
    def clock_synced(self) -> bool | None: ...


class _Common:
    def shm_bytes(self, path: Path) -> int | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_blocks * st.f_frsize

    def clock_synced(self) -> bool | None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        libc = ctypes.CDLL(name, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex, modes 0: read only
        state = int(libc.adjtimex(buf))
        return None if state < 0 else state != TIME_ERROR


class NvmlFacts(_Common):
    def __init__(self, gpus: NvmlGpus) -> None:
        self._gpus = gpus

    def driver(self) -> DriverFacts:
        try:
            nv = self._gpus.library()
            driver = nvml_text(nv.nvmlSystemGetDriverVersion())
            cuda_int = int(nv.nvmlSystemGetCudaDriverVersion_v2())
            cuda = f"{cuda_int // 1000}.{cuda_int % 1000 // 10}"
            modes = tuple(_modes(nv, i) for i in range(int(nv.nvmlDeviceGetCount())))
        except Exception as e:  # NVML missing, not initialised or failing: doctor says so
            return DriverFacts(None, None, (), str(e))
        return DriverFacts(driver, cuda, modes)


def _modes(nv: Any, i: int) -> GpuModes:
    h = nv.nvmlDeviceGetHandleByIndex(i)
    ecc = nvml_optional(lambda: nv.nvmlDeviceGetEccMode(h), nv)
    mig = nvml_optional(lambda: nv.nvmlDeviceGetMigMode(h), nv)
    persistence = nvml_optional(lambda: nv.nvmlDeviceGetPersistenceMode(h), nv)
    return GpuModes(
        i,
        None if persistence is None else bool(persistence),
        None if ecc is None else bool(ecc[0]),
        None if ecc is None else bool(ecc[1]),
        None if mig is None else bool(mig[0]),
    )


class SimulatedFacts(_Common):
    """The sandbox's GPUs: a driver that reads `simulated`, modes from host.json (default: all correct)."""

    def __init__(self, directory: Path, count: int) -> None:
        self.dir = directory
        self.count = count

    def driver(self) -> DriverFacts:
        try:
            over = json.loads((self.dir / "host.json").read_text())
        except (OSError, ValueError):
            over = {}
        modes = over.get("modes", {})
        count = int(over.get("gpu_count", self.count))
        return DriverFacts(
            over.get("driver", "570.133.20"),
            over.get("cuda", "12.8"),
            tuple(
                GpuModes(
                    i,
                    modes.get("persistence", True),
                    modes.get("ecc", True),
                    modes.get("ecc", True),
                    modes.get("mig", False),
                )
                for i in range(count)
            ),
        )


class NoFacts(_Common):
    def driver(self) -> DriverFacts:
        return DriverFacts(None, None, (), "no GPUs configured (gpu_backend = none)")
