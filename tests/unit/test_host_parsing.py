"""Pure pieces of the host layer: /proc parsing, journal JSON, the simulated GPU over a process view."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.core.errors import K25Error
from daemon.host.gpu import SimulatedGpus
from daemon.host.journal import parse_record
from daemon.host.memory import CgroupAvailable
from daemon.host.procs import ProcInfo, mapped_matching, systemd_cgroup

MIB = 2**20
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


def test_memavailable_of_a_memory_cgroup_is_its_limit_less_what_cannot_be_dropped(tmp_path: Path) -> None:
    """Issue 51: a cgroup's MemAvailable is its limit minus its usage, file pages counted as droppable
    (tmpfs is not: it is swap-backed), and never more than the host's; no limit: the host's figure."""
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir()
    v1.mkdir()
    (v2 / "memory.max").write_text("max\n")
    (v2 / "memory.current").write_text(f"{900 * MIB}\n")
    (v2 / "memory.stat").write_text(
        f"anon {500 * MIB}\nactive_file {100 * MIB}\ninactive_file {200 * MIB}\nshmem {100 * MIB}\n"
    )
    host = lambda: 10_000 * MIB  # noqa: E731
    assert CgroupAvailable(v2, host)() == 10_000 * MIB  # no limit
    (v2 / "memory.max").write_text(f"{1000 * MIB}\n")
    assert CgroupAvailable(v2, host)() == 400 * MIB  # 1000 - (900 - 300)
    assert CgroupAvailable(v2, lambda: 50 * MIB)() == 50 * MIB  # the host has less
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{900 * MIB}\n")
    (v1 / "memory.stat").write_text(
        f"cache {400 * MIB}\ntotal_active_file {100 * MIB}\ntotal_inactive_file {200 * MIB}\n"
    )
    assert CgroupAvailable(v1, host)() == 10_000 * MIB
    (v1 / "memory.limit_in_bytes").write_text(f"{1000 * MIB}\n")
    assert CgroupAvailable(v1, host)() == 400 * MIB
    with pytest.raises(K25Error, match="is not a memory cgroup"):
        CgroupAvailable(tmp_path)
