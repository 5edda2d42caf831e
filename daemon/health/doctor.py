"""`k25-ctl doctor`: is this host ready to serve? Each check passes, warns or fails, with how to fix it
(pure: doctor_run.py gathers what it reads)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from daemon.health.assess import Health
from daemon.host.gpu_health import HealthReading
from daemon.host.host_facts import DriverFacts

GIB = 1 << 30
INFINITY = (1 << 64) - 1  # systemd's LimitMEMLOCK=infinity


class Status(enum.StrEnum):
    PASS = "pass"  # noqa: S105 - a check's status, not a password
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class MemlockNeed:
    profile: str
    unit: str
    limit: int | None  # the unit's LimitMEMLOCK; None: not read
    need: int | None  # the bytes a level-1 park pins (its weights); None: not known


@dataclass(frozen=True)
class EngineSeen:
    profile: str
    version: str | None
    problem: str | None  # why the profile is invalid, if it is


@dataclass(frozen=True)
class DoctorInput:
    facts: DriverFacts
    expected_gpus: int
    readings: list[HealthReading]
    health: dict[int, tuple[Health, list[str]]]
    shm_bytes: int | None
    shm_min_bytes: int
    clock_synced: bool | None
    mem_available: int
    park_budget: int
    memlock: list[MemlockNeed] = field(default_factory=list)
    engines: list[EngineSeen] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)  # each port a profile needs that something else holds


def _one(name: str, bad: list[str], detail_ok: str, fix: str, status: Status = Status.FAIL) -> Check:
    if bad:
        return Check(name, status, "; ".join(bad), fix)
    return Check(name, Status.PASS, detail_ok)


def checks(d: DoctorInput) -> list[Check]:
    return [*_gpu_checks(d), *_links(d.readings), *_host_checks(d)]


def _gpu_checks(d: DoctorInput) -> list[Check]:
    f = d.facts
    count = [f"{len(f.gpus)} GPUs seen, {d.expected_gpus} expected"] if len(f.gpus) != d.expected_gpus else []
    ecc_off = [
        f"GPU {m.index} off" + (" (on after reset)" if m.ecc_pending else "")
        for m in f.gpus
        if m.ecc is False
    ]
    unwell = [
        f"GPU {i} {s}: {r[0] if r else ''}"
        for i, (s, r) in sorted(d.health.items())
        if s is not Health.HEALTHY
    ]
    driver = (
        Check("driver", Status.FAIL, f.error or "no driver", "install the NVIDIA driver; check nvidia-smi")
        if f.driver is None
        else Check("driver", Status.PASS, f"NVIDIA driver {f.driver}, CUDA {f.cuda or '?'}")
    )
    return [
        driver,
        _one(
            "gpu count",
            count,
            f"{len(f.gpus)} GPUs",
            "a GPU missing from NVML fell off the bus or is not bound to the driver: check dmesg, reboot",
        ),
        _one(
            "persistence mode",
            [f"GPU {m.index} off" for m in f.gpus if m.persistence is False],
            "on for every GPU",
            "nvidia-smi -pm 1 (or enable nvidia-persistenced): without it each engine start re-initialises",
            Status.WARN,
        ),
        _one(
            "ECC",
            ecc_off,
            "on for every GPU",
            "nvidia-smi -e 1, then reset the GPUs: HBM without ECC corrupts answers silently",
        ),
        _one(
            "MIG",
            [f"GPU {m.index} in MIG mode" for m in f.gpus if m.mig],
            "off for every GPU",
            "nvidia-smi -mig 0 (then reset): an engine needs the whole GPU",
        ),
        _one(
            "GPU health",
            unwell,
            "every GPU healthy",
            "k25-ctl gpus shows why; k25-ctl gpus reset (or reboot) clears what needs a reset",
        ),
    ]


def _host_checks(d: DoctorInput) -> list[Check]:
    missing = [
        f"{e.profile}: {e.problem or 'engine not found'}" for e in d.engines if e.problem or not e.version
    ]
    ram = (
        [f"{d.mem_available / GIB:.1f} GiB available, park budget {d.park_budget / GIB:.1f} GiB"]
        if d.mem_available < d.park_budget
        else []
    )
    clock = (
        Check(
            "clock", Status.WARN, "the kernel clock is not synchronized", "enable NTP: timedatectl set-ntp 1"
        )
        if d.clock_synced is False
        else Check("clock", Status.PASS, "synchronized" if d.clock_synced else "not known")
    )
    return [
        _memlock(d.memlock),
        _shm(d.shm_bytes, d.shm_min_bytes),
        _one(
            "free RAM",
            ram,
            f"{d.mem_available / GIB:.1f} GiB available for a park budget of {d.park_budget / GIB:.1f} GiB",
            "lower park_ram_budget_bytes or free memory: a park that cannot pin its weights fails",
            Status.WARN,
        ),
        _one(
            "engines installed",
            missing,
            ", ".join(sorted({f"{e.version}" for e in d.engines if e.version})) or "no profiles",
            "install the engine in the profile's environment, or fix the profile (k25-ctl check-profiles)",
        ),
        _one("ports", d.ports, "every profile's port is free or its own", "stop what holds the port"),
        clock,
    ]


def _links(readings: list[HealthReading]) -> list[Check]:
    width = [
        f"GPU {r.index} x{r.values.get('pcie_width')} of x{r.values.get('pcie_width_max')}"
        for r in readings
        if isinstance(r.values.get("pcie_width"), int)
        and isinstance(r.values.get("pcie_width_max"), int)
        and r.values["pcie_width"] < r.values["pcie_width_max"]  # type: ignore[operator]
    ]
    gens = sorted(
        {f"gen {r.values.get('pcie_gen')}/{r.values.get('pcie_gen_max')}" for r in readings if r.values}
    )
    down = [
        f"GPU {r.index}: {r.values.get('nvlink_up')} of {r.values.get('nvlink_links')} links up"
        for r in readings
        if isinstance(r.values.get("nvlink_links"), int)
        and r.values.get("nvlink_up") != r.values.get("nvlink_links")
    ]
    links = {r.values.get("nvlink_links") for r in readings if r.values.get("nvlink_links") is not None}
    return [
        _one(
            "PCIe",
            width,
            f"full width; {', '.join(gens) or 'generation not read'} (an idle GPU lowers its generation)",
            "reseat the GPU or its riser; a narrow link slows every weight load",
            Status.WARN,
        ),
        _one(
            "NVLink",
            down,
            f"{', '.join(map(str, links))} links up per GPU" if links else "no NVLink reported",
            "check the NVSwitch fabric (nvidia-smi nvlink -s; the fabric manager service)",
        ),
    ]


def _memlock(needs: list[MemlockNeed]) -> Check:
    bad = []
    for n in needs:
        if n.limit is None or n.limit == INFINITY:
            continue
        if n.need is None or n.limit < n.need:
            need = f"{n.need / GIB:.1f} GiB" if n.need else "its weights"
            bad.append(
                f"{n.unit} ({n.profile}): LimitMEMLOCK {n.limit / GIB:.2f} GiB, a level-1 park pins {need}"
            )
    return _one(
        "memlock",
        bad,
        "the parking engines' units may pin what they park" if needs else "no profile parks at level 1",
        "LimitMEMLOCK=infinity in the engine unit (a drop-in), then daemon-reload",
    )


SHM = "/dev/shm"  # noqa: S108 - the check's name: the shared-memory mount, not a temporary file


def _shm(size: int | None, minimum: int) -> Check:
    if size is None:
        return Check(SHM, Status.FAIL, "not mounted", "mount a tmpfs on /dev/shm")
    if size < minimum:
        return Check(
            SHM,
            Status.FAIL,
            f"{size / GIB:.1f} GiB, below {minimum / GIB:.0f} GiB",
            "enlarge it (mount -o remount,size=...): NCCL and the engines' workers share memory through it",
        )
    return Check(SHM, Status.PASS, f"{size / GIB:.1f} GiB")
