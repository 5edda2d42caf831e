"""GPU health, pure: what each driver event leaves on a GPU (NVIDIA's catalog), what a reading shows now,
the worst of both, one event from two sources, NVML's answers read (a fake pynvml: values, not
supported, lost), the doctor's checks, the reset command's words, and the sandbox's reset."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from daemon.health.assess import Health, Mark, combine, duplicate, live_reasons, mark_for
from daemon.health.doctor import DoctorInput, MemlockNeed, Status, checks
from daemon.health.reset import ResetCommand
from daemon.host.gpu_health import DriverEvent, HealthReading
from daemon.host.host_facts import DriverFacts, GpuModes
from daemon.host.nvml_health import NvmlHealth
from daemon.host.sim_health import HEALTHY, SimulatedHealth
from k25_sandbox import gpu_faults

NOW = 1_800_000_000.0


def _xid(code: int, source: str = "nvml", at: float = NOW, gpu: int = 3) -> DriverEvent:
    return DriverEvent(at, source, code, gpu)


@pytest.mark.parametrize(
    ("code", "state"),
    [(79, Health.NEEDS_RESET), (48, Health.NEEDS_RESET), (95, Health.NEEDS_RESET), (119, Health.NEEDS_RESET),
     (94, Health.DEGRADED), (74, Health.DEGRADED), (8, Health.DEGRADED), (999, Health.DEGRADED),
     (13, None), (31, None), (43, None), (45, None), (63, None), (92, None)],
)  # fmt: skip
def test_each_xid_leaves_the_state_its_catalog_row_gives(code: int, state: Health | None) -> None:
    mark = mark_for(_xid(code))
    assert (mark.state if mark else None) == state
    if mark:
        assert mark.xid == code
        assert "NVIDIA's action" in mark.reason


def test_ecc_events_double_needs_a_reset_single_is_left_to_the_rate() -> None:
    double = mark_for(DriverEvent(NOW, "nvml", 0, 1, kind="ecc_double"))
    assert double is not None
    assert double.state is Health.NEEDS_RESET
    assert mark_for(DriverEvent(NOW, "nvml", 0, 1, kind="ecc_single")) is None


def _reading(**values: Any) -> HealthReading:
    return HealthReading(0, "00000000:18:00.0", "GPU-x", HEALTHY | values, ())


def test_a_clean_reading_is_healthy_and_each_live_condition_warns() -> None:
    assert combine([], live_reasons(_reading(), None, NOW)) == (Health.HEALTHY, [])
    cases = {
        "a row remap is pending": _reading(remap_pending=True),
        "PCIe link x8, below its x16": _reading(pcie_width=8),
        "NVLink: 2 of 18 links down": _reading(nvlink_up=16),
    }
    for words, r in cases.items():
        state, reasons = combine([], live_reasons(r, None, NOW))
        assert state is Health.DEGRADED
        assert any(words in x for x in reasons), reasons
    slow = HealthReading(0, "b", "u", HEALTHY, ("hw_thermal", "sw_power_cap"))
    assert combine([], live_reasons(slow, None, NOW))[1] == [
        "clocks slowed: hw thermal",
        "clocks slowed: sw power cap",
    ]


def test_an_idle_gpu_lowering_its_pcie_generation_is_not_a_fault() -> None:
    assert combine([], live_reasons(_reading(pcie_gen=1), None, NOW))[0] is Health.HEALTHY


def test_a_lost_gpu_or_a_failed_remap_needs_a_reset() -> None:
    lost = HealthReading(2, "", "", lost=True)
    assert combine([], live_reasons(lost, None, NOW))[0] is Health.NEEDS_RESET
    assert combine([], live_reasons(_reading(remap_failure=True), None, NOW))[0] is Health.NEEDS_RESET


def test_corrected_ecc_rising_warns_for_an_hour() -> None:
    assert combine([], live_reasons(_reading(), (5, NOW - 60), NOW))[0] is Health.DEGRADED
    assert combine([], live_reasons(_reading(), (5, NOW - 7200), NOW))[0] is Health.HEALTHY


def test_the_worst_wins_and_every_reason_is_kept_worst_first() -> None:
    marks = [Mark(Health.DEGRADED, "contained", NOW), Mark(Health.NEEDS_RESET, "fell off", NOW)]
    state, reasons = combine(marks, [(Health.DEGRADED, "slow")])
    assert state is Health.NEEDS_RESET
    assert reasons[0] == "fell off"
    assert set(reasons) == {"contained", "fell off", "slow"}


def test_one_xid_from_both_sources_within_seconds_is_one_event() -> None:
    first = _xid(79, "nvml")
    assert duplicate(_xid(79, "kernel", NOW + 1), [first]) is first
    assert duplicate(_xid(79, "nvml", NOW + 1), [first]) is None  # the same source twice: two events
    assert duplicate(_xid(79, "kernel", NOW + 30), [first]) is None
    assert duplicate(_xid(48, "kernel", NOW + 1), [first]) is None
    assert duplicate(_xid(79, "kernel", NOW + 1, gpu=4), [first]) is None


class _NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def _fake_nvml(*, lost_at: str | None = None, unsupported: tuple[str, ...] = ()) -> Any:
    """pynvml's surface as NvmlHealth calls it: one GPU with 2 NVLink links."""

    def call(name: str, value: Any) -> Any:
        def read(*_: Any) -> Any:
            if name == lost_at:
                raise _NvmlError(15)
            if name in unsupported:
                raise _NvmlError(3)
            return value

        return read

    return SimpleNamespace(
        NVMLError=_NvmlError,
        NVML_NVLINK_MAX_LINKS=4,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: "h",
        nvmlDeviceGetPciInfo=lambda h: SimpleNamespace(busId=b"00000000:3B:00.0"),
        nvmlDeviceGetUUID=lambda h: "GPU-abc",
        nvmlDeviceGetTotalEccErrors=call("ecc", 2),
        nvmlDeviceGetRemappedRows=call("rows", (1, 0, 1, 0)),
        nvmlDeviceGetTemperature=call("temp", 40),
        nvmlDeviceGetPowerUsage=call("power", 120_500),
        nvmlDeviceGetCurrPcieLinkGeneration=call("gen", 1),
        nvmlDeviceGetMaxPcieLinkGeneration=call("gen", 5),
        nvmlDeviceGetCurrPcieLinkWidth=call("width", 16),
        nvmlDeviceGetMaxPcieLinkWidth=call("width", 16),
        nvmlDeviceGetNvLinkState=lambda h, link: 1 if link < 2 else (_ for _ in ()).throw(_NvmlError(3)),
        nvmlDeviceGetNvLinkErrorCounter=call("nvlink_errors", 0),
        nvmlDeviceGetCurrentClocksEventReasons=call("clocks", 0x1 | 0x40),
    )


class _Gpus:
    def __init__(self, nv: Any) -> None:
        self.nv = nv

    def library(self) -> Any:
        return self.nv


def test_nvml_readings_keep_not_supported_apart_from_zero() -> None:
    r = NvmlHealth(_Gpus(_fake_nvml(unsupported=("rows", "nvlink_errors"))))  # type: ignore[arg-type]
    (one,) = r.read()
    assert one.bus_id == "00000000:3b:00.0"
    assert one.values["ecc_volatile_corrected"] == 2
    assert one.values["remapped_correctable"] is None
    assert one.values["remap_pending"] is None
    assert one.values["power_w"] == 120.5
    assert (one.values["nvlink_up"], one.values["nvlink_links"], one.values["nvlink_errors"]) == (2, 2, None)
    assert one.slowdowns == ("hw_thermal",)  # idle is not a slowdown
    assert "remap_pending" in one.unsupported
    assert "nvlink_errors" in one.unsupported


def test_a_gpu_that_nvml_reports_lost_reads_lost() -> None:
    (one,) = NvmlHealth(_Gpus(_fake_nvml(lost_at="temp"))).read()  # type: ignore[arg-type]
    assert one.lost
    assert one.values == {}


def _doctor(**over: Any) -> dict[str, Any]:
    modes = tuple(GpuModes(i, True, True, True, False) for i in range(8))
    base = DoctorInput(
        facts=DriverFacts("570.1", "12.8", modes),
        expected_gpus=8,
        readings=[_reading()],
        health={0: (Health.HEALTHY, [])},
        shm_bytes=64 << 30,
        shm_min_bytes=1 << 30,
        clock_synced=True,
        mem_available=500 << 30,
        park_budget=400 << 30,
    )
    return {c.name: c for c in checks(DoctorInput(**(base.__dict__ | over)))}


def test_the_doctor_passes_a_ready_host_and_names_each_failure_with_a_fix() -> None:
    assert {c.status for c in _doctor().values()} == {Status.PASS}
    bad = _doctor(
        shm_bytes=64 << 20,
        clock_synced=False,
        mem_available=10 << 30,
        memlock=[MemlockNeed("baseline", "x.service", 64 << 10, 600 << 30)],
        ports=["port 8000 is held by PID 9 (nginx)"],
        health={0: (Health.NEEDS_RESET, ["Xid 79"])},
    )
    for name, status, fix in (
        ("/dev/shm", Status.FAIL, "enlarge it"),
        ("clock", Status.WARN, "NTP"),
        ("free RAM", Status.WARN, "park_ram_budget_bytes"),
        ("memlock", Status.FAIL, "LimitMEMLOCK=infinity"),
        ("ports", Status.FAIL, "stop what holds the port"),
        ("GPU health", Status.FAIL, "k25-ctl gpus reset"),
    ):
        assert bad[name].status is status, bad[name]
        assert fix in bad[name].fix, bad[name]
    assert "600.0 GiB" in bad["memlock"].detail


def test_the_reset_command_names_the_gpus_as_configured() -> None:
    smi = ResetCommand(("nvidia-smi", "--gpu-reset"), "gpu", 60)
    assert smi.for_gpus([0, 3]) == ["nvidia-smi", "--gpu-reset", "-i", "0,3"]
    assert ResetCommand(("nvidia-smi", "--gpu-reset"), "board", 60).for_gpus([0, 3]) == [
        "nvidia-smi",
        "--gpu-reset",
    ]
    assert ResetCommand(("reset-gpus", "{gpus}"), "gpu", 60).for_gpus([1]) == ["reset-gpus", "1"]


def test_the_simulated_gpus_read_their_faults_and_the_fake_reset_clears_them(tmp_path: Path) -> None:
    gpu_faults.set_fault(tmp_path, 2, values={"pcie_width": 4}, slowdowns=["sw_thermal"])
    gpu_faults.set_fault(tmp_path, 5, lost=True)
    sim = SimulatedHealth(tmp_path, 8)
    by = {r.index: r for r in sim.read()}
    assert by[2].values["pcie_width"] == 4
    assert by[2].slowdowns == ("sw_thermal",)
    assert by[5].lost
    assert by[0].values == HEALTHY
    assert gpu_faults.main(["reset", "--dir", str(tmp_path), "-i", "2"]) == 0
    assert SimulatedHealth(tmp_path, 8).read()[2].values == HEALTHY
    (tmp_path / "reset-fails").touch()
    assert gpu_faults.main(["reset", "--dir", str(tmp_path)]) == 3
    assert SimulatedHealth(tmp_path, 8).read()[5].lost  # a failed reset clears nothing


def test_the_simulated_event_path_delivers_what_the_injector_writes(tmp_path: Path) -> None:
    sim = SimulatedHealth(tmp_path, 8)
    try:
        assert sim.registration().startswith("simulated")
        assert sim.events(0.01) == []
        gpu_faults.xid_event(tmp_path, 4, 48, pid=12)
        (e,) = sim.events(5)
        assert (e.gpu, e.code, e.pid, e.kind, e.source) == (4, 48, 12, "xid", "nvml")
    finally:
        sim.close()
