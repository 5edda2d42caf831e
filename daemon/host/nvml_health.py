"""The GPUs' health through NVML (nvidia-ml-py): the readings of gpu_health.py and NVML's event set (Xid
critical errors and ECC events). Every read that the GPU or driver refuses as not supported is None; a
GPU that NVML reports lost (NVML_ERROR_GPU_IS_LOST) is `lost`, the rest of its readings unread."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from daemon.host.gpu import GpuUnavailable, NvmlGpus, nvml_text
from daemon.host.gpu_health import DriverEvent, HealthReading, Value, bus_id

# Clock event reasons that mean the GPU is slowed against its will (NVML's nvmlClocksEventReason*; idle,
# application clocks, sync boost and display settings are not slowdowns).
SLOWDOWN_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
EVENT_TYPES = {  # what k25-ctl registers for, each on its own (a driver may refuse one and take the others)
    "xid": 0x8,  # nvmlEventTypeXidCriticalError
    "ecc_double": 0x2,  # nvmlEventTypeDoubleBitEccError
    "ecc_single": 0x1,  # nvmlEventTypeSingleBitEccError
}
NVLINK_COUNTERS = (0, 1, 2, 3)  # DL replay, recovery, CRC flit, CRC data
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
TIMEOUT = 10  # NVML_ERROR_TIMEOUT


class _Lost(Exception):
    pass


class NvmlHealth:
    """Reads through the daemon's one NVML (NvmlGpus initialises it). `events` waits in NVML itself."""

    def __init__(self, gpus: NvmlGpus) -> None:
        self._gpus = gpus
        self._lock = threading.Lock()
        self._set: Any = None
        self._registered: dict[int, list[str]] = {}
        self._refused: dict[int, list[str]] = {}
        self._closed = threading.Event()
        self._links: dict[int, list[int]] = {}  # each GPU's NVLink links, found at the first reading

    def _nv(self) -> Any:
        return self._gpus.library()

    def read(self) -> list[HealthReading]:
        nv = self._nv()
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            raise GpuUnavailable(f"NVML failed: {e}") from e
        return [self._one(nv, i) for i in range(count)]

    def _one(self, nv: Any, i: int) -> HealthReading:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
            pci = nv.nvmlDeviceGetPciInfo(h).busId
            uuid = nv.nvmlDeviceGetUUID(h)
        except nv.NVMLError as e:
            lost = _code(e) == GPU_IS_LOST
            return HealthReading(i, "", "", lost=lost, error=None if lost else str(e))
        reading = HealthReading(i, bus_id(nvml_text(pci)), nvml_text(uuid))
        try:
            values, slowdowns, self._links[i] = _values(nv, h, self._links.get(i))
        except _Lost:
            return HealthReading(reading.index, reading.bus_id, reading.uuid, lost=True)
        return HealthReading(reading.index, reading.bus_id, reading.uuid, values, slowdowns)

    # -- events ------------------------------------------------------------------------------------------

    def _event_set(self) -> Any:
        with self._lock:
            if self._set is not None:
                return self._set
            nv = self._nv()
            self._set = nv.nvmlEventSetCreate()
            for i in range(int(nv.nvmlDeviceGetCount())):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                for name, bit in EVENT_TYPES.items():
                    try:
                        nv.nvmlDeviceRegisterEvents(h, bit, self._set)
                        self._registered.setdefault(i, []).append(name)
                    except nv.NVMLError as e:
                        self._refused.setdefault(i, []).append(f"{name} ({e})")
            return self._set

    def registration(self) -> str:
        try:
            self._event_set()
        except Exception as e:  # any failure to make the set (GpuUnavailable, NVMLError) is the answer
            return f"no event set: {e}"
        gpus = sorted(set(self._registered) | set(self._refused))
        return "; ".join(
            f"GPU {i}: registered {', '.join(self._registered.get(i, [])) or 'nothing'}"
            + (f", refused {', '.join(self._refused[i])}" if i in self._refused else "")
            for i in gpus
        )

    def events(self, timeout_s: float) -> list[DriverEvent]:
        if self._closed.is_set():
            return []
        nv = self._nv()
        event_set = self._event_set()
        if not self._registered:  # nothing to wait on: wait out the timeout (no spin)
            self._closed.wait(timeout_s)
            return []
        try:
            data = nv.nvmlEventSetWait_v2(event_set, int(timeout_s * 1000))
        except nv.NVMLError as e:
            if _code(e) == TIMEOUT:
                return []
            raise GpuUnavailable(f"NVML event wait failed: {e}") from e
        kind = {0x8: "xid", 0x2: "ecc_double", 0x1: "ecc_single"}.get(int(data.eventType), "xid")
        try:
            gpu: int | None = int(nv.nvmlDeviceGetIndex(data.device))
        except nv.NVMLError:
            gpu = None
        code = int(data.eventData) if kind == "xid" else 0
        return [DriverEvent(time.time(), "nvml", code, gpu, kind=kind, message=f"NVML event {kind}")]

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._set is not None:
                with contextlib.suppress(Exception):  # closing: nothing is left to tell
                    self._nv().nvmlEventSetFree(self._set)
                self._set = None


def _values(
    nv: Any, h: Any, links: list[int] | None
) -> tuple[dict[str, Value | None], tuple[str, ...] | None, list[int]]:
    def get(read: Any) -> Any:
        try:
            return read()
        except nv.NVMLError as e:
            if _code(e) == GPU_IS_LOST:
                raise _Lost from e
            return None  # not supported (or not readable) on this GPU and driver: never 0

    v: dict[str, Value | None] = {}
    for name, err, counter in (
        ("ecc_volatile_corrected", 0, 0),
        ("ecc_volatile_uncorrected", 1, 0),
        ("ecc_aggregate_corrected", 0, 1),
        ("ecc_aggregate_uncorrected", 1, 1),
    ):
        v[name] = get(lambda e=err, c=counter: int(nv.nvmlDeviceGetTotalEccErrors(h, e, c)))
    rows = get(lambda: nv.nvmlDeviceGetRemappedRows(h))
    for k, name in enumerate(
        ("remapped_correctable", "remapped_uncorrectable", "remap_pending", "remap_failure")
    ):
        v[name] = None if rows is None else (int(rows[k]) if k < 2 else bool(rows[k]))
    v["temperature_c"] = get(lambda: int(nv.nvmlDeviceGetTemperature(h, 0)))
    v["power_w"] = get(lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
    v["pcie_gen"] = get(lambda: int(nv.nvmlDeviceGetCurrPcieLinkGeneration(h)))
    v["pcie_gen_max"] = get(lambda: int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h)))
    v["pcie_width"] = get(lambda: int(nv.nvmlDeviceGetCurrPcieLinkWidth(h)))
    v["pcie_width_max"] = get(lambda: int(nv.nvmlDeviceGetMaxPcieLinkWidth(h)))
    found, up, errors = _nvlink(nv, h, get, links)
    v["nvlink_up"], v["nvlink_links"], v["nvlink_errors"] = up, (len(found) if found else None), errors
    mask = get(lambda: int(_clock_reasons(nv, h)))
    slowdowns = None if mask is None else tuple(n for bit, n in SLOWDOWN_BITS.items() if mask & bit)
    return v, slowdowns, found


def _nvlink(nv: Any, h: Any, get: Any, known: list[int] | None) -> tuple[list[int], int | None, int | None]:
    """The links that exist (NVML answers their state; asked of every possible link once, then of those),
    how many are up, and their error counters' sum."""
    found: list[int] = []
    up = 0
    errors: int | None = None
    for link in known if known is not None else range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        state = get(lambda k=link: int(nv.nvmlDeviceGetNvLinkState(h, k)))
        if state is None:
            continue
        found.append(link)
        up += 1 if state else 0
        for counter in NVLINK_COUNTERS:
            n = get(lambda k=link, c=counter: int(nv.nvmlDeviceGetNvLinkErrorCounter(h, k, c)))
            if n is not None:
                errors = (errors or 0) + n
    if not found:
        return found, None, None  # no NVLink here (a PCIe card), or the driver does not say
    return found, up, errors


def _clock_reasons(nv: Any, h: Any) -> int:
    read = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return int(read(h))


def _code(e: Exception) -> int | None:
    value = getattr(e, "value", None)
    return int(value) if isinstance(value, int) else None
