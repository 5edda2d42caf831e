"""GPUs: the real ones through NVML, or simulated ones for the sandbox. NVML that cannot be read is an
error (GpuUnavailable), never "no GPUs": a teardown must not report clean GPUs it could not see.
Importable without the web stack (the device machine has no FastAPI)."""

from __future__ import annotations

import ctypes
import re
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from daemon.core.errors import K25Error
from daemon.host.procs import ProcessView


class GpuUnavailable(K25Error):
    """The GPUs cannot be read (NVML missing, not initialised, or failing)."""

    status_code = 503


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: int | None


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    uuid: str
    memory_total_mib: int
    memory_used_mib: int
    processes: tuple[GpuProcess, ...]
    utilization_pct: int | None = None
    power_w: float | None = None


class GpuView(Protocol):
    # True where GPUs are expected (NVML, simulated): a GPU that cannot be seen is then an error.
    required: bool

    def gpus(self, *, light: bool = False) -> list[GpuInfo]: ...
    def driver_version(self) -> str | None: ...


MIB = 1024 * 1024


class NvmlGpus:
    """NVML, initialised on first use (and tried again after a failure); every failure to read it raises
    GpuUnavailable with NVML's own message."""

    required = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None

    def library(self) -> Any:
        """pynvml, initialised (the health readings share it)."""
        with self._lock:
            if self._nvml is None:
                try:
                    import pynvml

                    pynvml.nvmlInit()
                except Exception as e:  # ImportError, NVMLError (no driver, no library): both mean unreadable
                    raise GpuUnavailable(f"NVML cannot be initialised: {e}") from e
                self._nvml = pynvml
            return self._nvml

    def driver_version(self) -> str | None:
        try:
            nv = self.library()
            v = nv.nvmlSystemGetDriverVersion()
        except Exception:
            return None
        return nvml_text(v)

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        """All GPUs; `light` reads only memory and processes (what teardown needs, fast)."""
        nv = self.library()
        try:
            return self._read(nv, light)
        except nv.NVMLError as e:
            raise GpuUnavailable(f"NVML failed: {e}") from e

    def _read(self, nv: Any, light: bool) -> list[GpuInfo]:
        out = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            procs = []
            for getter in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                try:
                    for p in getter(h):
                        used = p.usedGpuMemory
                        procs.append(GpuProcess(int(p.pid), None if used is None else int(used) // MIB))
                except nv.NVMLError:
                    pass
            info = GpuInfo(
                index=i,
                name="",
                uuid="",
                memory_total_mib=int(mem.total) // MIB,
                memory_used_mib=int(mem.used) // MIB,
                processes=tuple({p.pid: p for p in procs}.values()),
            )
            if not light:
                name, uuid = nv.nvmlDeviceGetName(h), nv.nvmlDeviceGetUUID(h)
                info = replace(
                    info,
                    name=nvml_text(name),
                    uuid=nvml_text(uuid),
                    utilization_pct=nvml_optional(
                        lambda h=h: int(nv.nvmlDeviceGetUtilizationRates(h).gpu), nv
                    ),
                    power_w=nvml_optional(lambda h=h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0, nv),
                )
            out.append(info)
        return out


def nvml_optional(read: Any, nv: Any) -> Any:
    """An NVML read, or None where NVML refuses it (not supported on this GPU or driver)."""
    try:
        return read()
    except nv.NVMLError:
        return None


def nvml_text(v: Any) -> str:
    """A string NVML returned: bytes (older pynvml), a ctypes char array (a struct's field) or str."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, ctypes.Array):
        return bytes(v).split(b"\0", 1)[0].decode()
    return str(v)


class NoGpus:
    """A host configured without GPUs (gpu_backend = "none")."""

    required = False

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        return []

    def driver_version(self) -> str | None:
        return None


DEVICE_INDEX_RE = re.compile(r"nvidia(\d+)$")


class SimulatedGpus:
    """GPUs of the sandbox: device N is the fake file `<dir>/nvidiaN`; a live process that maps it holds
    `holder_mib` of its memory. So memory is used only while a holder lives, as on a real GPU."""

    required = True

    def __init__(
        self,
        procs: ProcessView,
        device_glob: str,
        *,
        count: int = 8,
        total_mib: int = 143_771,
        holder_mib: int = 70_000,
        idle_mib: int = 4,
    ) -> None:
        self._procs = procs
        self._glob = device_glob
        self._count = count
        self._total = total_mib
        self._holder = holder_mib
        self._idle = idle_mib

    def driver_version(self) -> str | None:
        return "simulated"

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        holders: dict[int, list[int]] = {i: [] for i in range(self._count)}
        # Only the maps of live processes: the sampler calls this every few seconds.
        for path, pids in self._procs.mapped(self._glob).items():
            m = DEVICE_INDEX_RE.search(Path(path).name)
            if m and int(m[1]) in holders:
                holders[int(m[1])].extend(sorted(pids))
        return [
            GpuInfo(
                index=i,
                name="Simulated H200",
                uuid=f"GPU-sim-{i:04d}",
                memory_total_mib=self._total,
                memory_used_mib=min(self._total, self._idle + self._holder * len(pids)),
                processes=tuple(GpuProcess(pid, self._holder) for pid in sorted(pids)),
                utilization_pct=0,
                power_w=75.0,
            )
            for i, pids in holders.items()
        ]
