"""Pure pieces of the host layer: /proc parsing, journal JSON, the simulated GPU over a process view."""

from __future__ import annotations

import json

from daemon.host.gpu import SimulatedGpus
from daemon.host.journal import parse_record
from daemon.host.procs import ProcInfo, mapped_matching, systemd_cgroup

CGROUP_V1 = "9:name=systemd:/k25-sbx/system.slice/k25-engine@x.service\n4:memory:/m\n0::/k25-sbx/x\n"
MAPS = (
    "7f05b60b9000-7f05b60ba000 rw-s 00000000 fe:00 2146521                    /dev/nvidia3\n"
    "7f05b60ba000-7f05b60bb000 rw-s 00000000 fe:00 2146522                    /dev/nvidiactl\n"
    "7f05b60bc000-7f05b60bd000 rw-s 00000000 00:1a 99                         /dev/shm/psm_1 (deleted)\n"
    "7ffd0000-7ffd1000 r-xp 00000000 00:00 0                                  [vdso]\n"
)


def test_systemd_cgroup_prefers_the_named_hierarchy() -> None:
    assert systemd_cgroup(CGROUP_V1) == "/k25-sbx/system.slice/k25-engine@x.service"
    assert systemd_cgroup("0::/system.slice/a.service\n") == "/system.slice/a.service"


def test_mapped_matching_uses_the_glob() -> None:
    assert mapped_matching(MAPS, "/dev/nvidia*") == ("/dev/nvidia3", "/dev/nvidiactl")
    assert mapped_matching(MAPS, "/dev/nvidia[0-9]*") == ("/dev/nvidia3",)
    assert mapped_matching(MAPS, "/dev/shm/*") == ("/dev/shm/psm_1",)


def test_journal_record_parsing() -> None:
    line = json.dumps(
        {
            "MESSAGE": "hello",
            "_PID": "42",
            "PRIORITY": "6",
            "__REALTIME_TIMESTAMP": "1700000000000000",
            "__CURSOR": "s=abc",
            "_SYSTEMD_UNIT": "x.service",
        }
    )
    rec = parse_record(line, "fallback.service")
    assert rec is not None
    assert (rec.unit, rec.message, rec.pid, rec.priority, rec.cursor) == (
        "x.service",
        "hello",
        42,
        6,
        "s=abc",
    )
    assert rec.timestamp == 1_700_000_000.0
    binary = parse_record(json.dumps({"MESSAGE": [104, 105, 255]}), "u.service")
    assert binary is not None
    assert binary.message == "hi\ufffd"
    assert binary.unit == "u.service"
    assert parse_record("not json", "u") is None


def _proc(pid: int, mapped: tuple[str, ...], state: str = "S") -> ProcInfo:
    return ProcInfo(pid, 1, 0, "python", "VLLM::Worker_TP0", (), state, "", "/", (), mapped)


class _Procs:
    def __init__(self, procs: list[ProcInfo]) -> None:
        self.procs = procs

    def snapshot(
        self, device_glob: str, shm_glob: str | None = None, *, with_fds: bool = True
    ) -> list[ProcInfo]:
        return self.procs

    def cgroup_pids(self, control_group: str) -> list[int]:
        return []

    def listeners(self, ports: tuple[int, ...]) -> dict[int, list[int | None]]:
        return {}

    def access_problem(self) -> str | None:
        return None

    def mapped(self, pattern: str) -> dict[str, set[int]]:
        held: dict[str, set[int]] = {}
        for p in self.procs:
            if p.state != "Z":
                for path in p.mapped_devices:
                    held.setdefault(path, set()).add(p.pid)
        return held


def test_simulated_gpu_counts_only_live_holders() -> None:
    procs = _Procs([_proc(10, ("/s/dev/nvidia1",)), _proc(11, ("/s/dev/nvidia1",), state="Z")])
    gpus = SimulatedGpus(procs, "/s/dev/nvidia*", count=2, total_mib=1000, holder_mib=300, idle_mib=4)
    g0, g1 = gpus.gpus()
    assert (g0.memory_used_mib, g0.processes) == (4, ())
    assert g1.memory_used_mib == 304
    assert [p.pid for p in g1.processes] == [10]
    procs.procs = []
    assert [g.memory_used_mib for g in gpus.gpus()] == [4, 4]


def test_a_units_state_is_read_unit_interface_first_then_service() -> None:
    """ActiveState before Result: a failed state is never paired with the Result from before the failure
    (systemd sets Result first). The reverse order once read a SIGKILLed engine as stopped by hand."""
    from daemon.host.systemd_dbus import ServiceUnitProxy

    order = [
        name
        for name, _ in ServiceUnitProxy._dbus_iter_interfaces_meta()
        if name.startswith("org.freedesktop.systemd1")
    ]
    assert order == ["org.freedesktop.systemd1.Unit", "org.freedesktop.systemd1.Service"]
