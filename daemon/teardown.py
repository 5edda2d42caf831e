"""Teardown, step one: the plan. A pure function over a snapshot of the host: which processes die and why,
which are spared and why, which /dev/shm files go and which stay. Nothing here touches the machine, and
nothing here needs the web stack (it runs on the GPU machine's tests too)."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from daemon.host.gpu import GpuInfo
from daemon.host.procs import ProcInfo
from daemon.host.shm import ShmEntry

DEVICE_INDEX_RE = re.compile(r"(\d+)$")
NVML_READER = "an NVML reader: GPU control devices only, no GPU context, no /dev/nvidiaN mapped"


@dataclass(frozen=True)
class Snapshot:
    processes: list[ProcInfo]
    gpus: list[GpuInfo]
    shm: list[ShmEntry]
    self_pid: int
    unit_pids: dict[str, list[int]] = field(default_factory=dict)  # the stopped units' cgroup members
    managed_units: tuple[str, ...] = ()  # every managed engine unit's name


@dataclass(frozen=True)
class TeardownPolicy:
    device_glob: str
    engine_titles: tuple[str, ...]  # fnmatch patterns, e.g. VLLM::*, sglang::*
    shm_patterns: tuple[str, ...]  # fnmatch patterns of engine shm files
    protected_names: tuple[str, ...]
    foreign: Literal["kill", "refuse"] = "kill"
    gpus: tuple[int, ...] | None = None  # the profile's GPUs; None: all


@dataclass(frozen=True)
class Victim:
    pid: int
    title: str
    reasons: tuple[str, ...]
    foreign: bool  # not from a managed unit
    gpu_mib: int | None
    started: float


@dataclass(frozen=True)
class Spared:
    pid: int
    title: str
    reason: str


@dataclass(frozen=True)
class ShmDecision:
    entry: ShmEntry
    reason: str


@dataclass(frozen=True)
class TeardownPlan:
    victims: list[Victim]
    spared: list[Spared]
    shm_remove: list[ShmDecision]
    shm_keep: list[ShmDecision]
    gpus: tuple[int, ...] | None
    refused: list[Victim] = field(default_factory=list)  # foreign processes under policy `refuse`

    @property
    def is_refused(self) -> bool:
        return bool(self.refused)


def _device_in_scope(path: str, gpus: tuple[int, ...] | None) -> bool:
    """A mapped /dev/nvidiaN means a context on GPU N. The control devices (nvidiactl, nvidia-uvm) do not:
    NVML readers, k25-ctl itself included, map /dev/nvidiactl too (seen on an H200, driver 580)."""
    m = DEVICE_INDEX_RE.search(Path(path).name)
    return m is not None and (gpus is None or int(m[1]) in gpus)


def _protection(p: ProcInfo, snap: Snapshot, ancestors: set[int], policy: TeardownPolicy) -> str | None:
    if p.pid == 1:
        return "PID 1"
    if p.pid == snap.self_pid:
        return "k25-ctl itself"
    if p.pid in ancestors:
        return "an ancestor of k25-ctl"
    exe = Path(p.cmdline[0]).name if p.cmdline else ""
    if p.name in policy.protected_names or exe in policy.protected_names:
        return f"protected name {p.name or exe!r}"
    return None


def _ancestors(pid: int, by_pid: dict[int, ProcInfo]) -> set[int]:
    out: set[int] = set()
    while pid in by_pid and pid not in out and pid > 1:
        pid = by_pid[pid].ppid
        out.add(pid)
    return out


def _reasons(
    p: ProcInfo, snap: Snapshot, policy: TeardownPolicy, gpu_pids: dict[int, list[int]]
) -> list[str]:
    reasons = []
    for unit, pids in snap.unit_pids.items():
        if p.pid in pids:
            reasons.append(f"in the stopped unit's cgroup ({unit})")
    if p.pid in gpu_pids:
        reasons.append("GPU context on GPU " + ",".join(str(i) for i in gpu_pids[p.pid]) + " (NVML)")
    if any(_device_in_scope(d, policy.gpus) for d in p.mapped_devices):
        reasons.append("maps " + ", ".join(p.mapped_devices))
    if any(fnmatch.fnmatchcase(p.title, t) for t in policy.engine_titles):
        reasons.append(f"engine process title {p.title.split()[0]!r}")
    return reasons


def _from_managed_unit(p: ProcInfo, snap: Snapshot) -> bool:
    if any(p.pid in pids for pids in snap.unit_pids.values()):
        return True
    return any(part in snap.managed_units for part in p.cgroup.split("/"))


def plan(snap: Snapshot, policy: TeardownPolicy) -> TeardownPlan:
    by_pid = {p.pid: p for p in snap.processes}
    ancestors = _ancestors(snap.self_pid, by_pid)
    gpu_pids: dict[int, list[int]] = {}
    gpu_mib: dict[int, int] = {}
    for g in snap.gpus:
        if policy.gpus is None or g.index in policy.gpus:
            for gp in g.processes:
                gpu_pids.setdefault(gp.pid, []).append(g.index)
                gpu_mib[gp.pid] = gpu_mib.get(gp.pid, 0) + (gp.used_mib or 0)

    chosen: dict[int, list[str]] = {}
    spared: list[Spared] = []
    for p in snap.processes:
        reasons = _reasons(p, snap, policy, gpu_pids)
        guard = _protection(p, snap, ancestors, policy)
        if reasons and guard:
            spared.append(Spared(p.pid, p.title, f"{guard} (would be a victim: {'; '.join(reasons)})"))
        elif reasons:
            chosen[p.pid] = reasons
        elif p.open_devices or p.mapped_devices:
            spared.append(Spared(p.pid, p.title, guard or NVML_READER))
    # Children of victims go with them (a worker pool's helpers, a shell wrapper's engine).
    changed = True
    while changed:
        changed = False
        for p in snap.processes:
            if p.pid not in chosen and p.ppid in chosen and p.pid != p.ppid:
                if _protection(p, snap, ancestors, policy) is None:
                    chosen[p.pid] = [f"child of victim {p.ppid}"]
                    changed = True

    victims = [
        Victim(
            pid,
            by_pid[pid].title,
            tuple(r),
            not _from_managed_unit(by_pid[pid], snap),
            gpu_mib.get(pid),
            by_pid[pid].started,
        )
        for pid, r in sorted(chosen.items())
    ]
    refused = [v for v in victims if v.foreign] if policy.foreign == "refuse" else []
    remove, keep = plan_shm(snap.shm, policy.shm_patterns, victim_pids=set(chosen))
    return TeardownPlan(victims, spared, remove, keep, policy.gpus, refused)


def plan_shm(
    entries: list[ShmEntry], patterns: tuple[str, ...], victim_pids: set[int]
) -> tuple[list[ShmDecision], list[ShmDecision]]:
    """Remove only regular files that match an engine pattern and that no live process holds, except the
    victims, which will be gone by then."""
    remove, keep = [], []
    for e in entries:
        pattern = next((p for p in patterns if fnmatch.fnmatchcase(e.name, p)), None)
        holders = [pid for pid in e.users if pid not in victim_pids]
        if e.is_symlink or not e.is_file:
            keep.append(ShmDecision(e, "not a regular file (never followed)"))
        elif pattern is None:
            keep.append(ShmDecision(e, "not an engine file"))
        elif holders:
            keep.append(ShmDecision(e, f"in use by live process {', '.join(map(str, holders))}"))
        else:
            remove.append(ShmDecision(e, f"engine file ({pattern}) held by no other process"))
    return remove, keep
