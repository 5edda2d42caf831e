"""Teardown, step one: the plan. A pure function over a snapshot of the host: which processes die and why,
which are spared and why, which /dev/shm files go and which stay. Nothing here touches the machine, and
nothing here needs the web stack (it runs on the GPU machine's tests too)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from daemon.host.gpu import GpuInfo
from daemon.host.procs import ProcInfo
from daemon.host.shm import ShmEntry

DEVICE_INDEX_RE = re.compile(r"(\d+)$")
NVML_READER = "an NVML reader: GPU control devices only, no GPU context, no /dev/nvidiaN mapped"


@dataclass(frozen=True)
class Parked:
    """An engine parked on purpose (asleep, its process kept for a fast wake): never a victim, and what
    it may still hold on each GPU when the teardown verifies."""

    reason: str  # e.g. "parked profile baseline (sleeping since 03:12)"
    pids: frozenset[int]
    residual_mib: Mapping[int, int] = field(default_factory=dict)  # GPU index -> MiB


@dataclass(frozen=True)
class Snapshot:
    processes: list[ProcInfo]
    gpus: list[GpuInfo]
    shm: list[ShmEntry]
    self_pid: int
    unit_pids: dict[str, list[int]] = field(default_factory=dict)  # the stopped units' cgroup members
    managed_units: tuple[str, ...] = ()  # every managed engine unit's name
    gpu_error: str | None = None  # NVML could not be read: the plan goes without GPU contexts
    listeners: dict[int, list[int | None]] = field(default_factory=dict)  # port the next engine needs -> PIDs
    parked: tuple[Parked, ...] = ()  # engines asleep on purpose: spared


@dataclass(frozen=True)
class TeardownPolicy:
    device_glob: str
    engine_titles: tuple[str, ...]  # fnmatch patterns, e.g. VLLM::*, sglang::*
    shm_patterns: tuple[str, ...]  # fnmatch patterns of engine shm files
    protected_names: tuple[str, ...]
    foreign: Literal["kill", "refuse"] = "kill"
    gpus: tuple[int, ...] | None = None  # the profile's GPUs; None: all
    front_end_titles: tuple[str, ...] = ()  # engine API servers (`vllm serve *`): may hold a port


@dataclass(frozen=True)
class Victim:
    pid: int
    title: str
    reasons: tuple[str, ...]
    foreign: bool  # not from a managed unit
    gpu_mib: int | None
    started: float
    orphan: bool = False  # an engine process whose parent is gone: a short SIGTERM grace
    gpus: tuple[int, ...] = ()  # the GPUs it holds (NVML contexts, mapped devices)


@dataclass(frozen=True)
class PortHolder:
    port: int
    pid: int | None  # None: a process outside k25-ctl's PID namespace
    title: str

    def __str__(self) -> str:
        who = f"PID {self.pid} ({self.title})" if self.pid is not None else "a process k25-ctl cannot see"
        return f"port {self.port} is held by {who}"


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
    port_blocked: list[PortHolder] = field(default_factory=list)  # not engines: the switch must not go on
    gpu_error: str | None = None

    @property
    def is_refused(self) -> bool:
        return bool(self.refused)


def _device_index(path: str) -> int | None:
    """A mapped /dev/nvidiaN means a context on GPU N. The control devices (nvidiactl, nvidia-uvm) do not:
    NVML readers, k25-ctl itself included, map /dev/nvidiactl too (seen on an H200, driver 580)."""
    m = DEVICE_INDEX_RE.search(Path(path).name)
    return int(m[1]) if m else None


def _protection(p: ProcInfo, snap: Snapshot, ancestors: set[int], policy: TeardownPolicy) -> str | None:
    if parked := next((pk.reason for pk in snap.parked if p.pid in pk.pids), None):
        return parked
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


def _matches(title: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(title, t) for t in patterns)


class _Scope:
    """Which GPUs each process holds (NVML contexts on any GPU, mapped /dev/nvidiaN), and whether that lies
    inside the teardown's GPUs."""

    def __init__(self, snap: Snapshot, gpus: tuple[int, ...] | None) -> None:
        self.gpus = gpus
        self.nvml: dict[int, list[int]] = {}
        self.mib: dict[int, int] = {}
        for g in snap.gpus:
            for gp in g.processes:
                self.nvml.setdefault(gp.pid, []).append(g.index)
                if gpus is None or g.index in gpus:
                    self.mib[gp.pid] = self.mib.get(gp.pid, 0) + (gp.used_mib or 0)

    def held(self, p: ProcInfo) -> set[int]:
        mapped = {i for d in p.mapped_devices if (i := _device_index(d)) is not None}
        return mapped | set(self.nvml.get(p.pid, ()))

    def inside(self, indices: set[int] | list[int]) -> list[int]:
        return sorted(i for i in indices if self.gpus is None or i in self.gpus)

    def only_outside(self, p: ProcInfo) -> bool:
        held = self.held(p)
        return bool(held) and not self.inside(held)

    def outside_reason(self, p: ProcInfo) -> str:
        held = ",".join(map(str, sorted(self.held(p))))
        scope = ",".join(map(str, self.gpus or ()))
        return f"holds GPU {held} only, outside this teardown's GPUs ({scope})"


def _reasons(p: ProcInfo, snap: Snapshot, policy: TeardownPolicy, scope: _Scope) -> list[str]:
    reasons = []
    in_unit = [unit for unit, pids in snap.unit_pids.items() if p.pid in pids]
    reasons += [f"in the stopped unit's cgroup ({unit})" for unit in in_unit]
    if nvml := scope.inside(scope.nvml.get(p.pid, [])):
        reasons.append("GPU context on GPU " + ",".join(map(str, nvml)) + " (NVML)")
    mapped = [d for d in p.mapped_devices if (i := _device_index(d)) is not None and scope.inside([i])]
    if mapped:
        reasons.append("maps " + ", ".join(p.mapped_devices))
    # A title alone never reaches across GPUs: an engine holding only other GPUs serves another profile.
    if _matches(p.title, policy.engine_titles) and (in_unit or not scope.only_outside(p)):
        reasons.append(f"engine process title {p.title.split()[0]!r}")
    return reasons


def _from_managed_unit(p: ProcInfo, snap: Snapshot) -> bool:
    if any(p.pid in pids for pids in snap.unit_pids.values()):
        return True
    return any(part in snap.managed_units for part in p.cgroup.split("/"))


def _is_orphan(p: ProcInfo, by_pid: dict[int, ProcInfo], policy: TeardownPolicy) -> bool:
    """An engine process whose parent is gone (reparented to PID 1, or to a parent we cannot see)."""
    return _matches(p.title, policy.engine_titles) and (p.ppid <= 1 or p.ppid not in by_pid)


def _port_holders(
    snap: Snapshot,
    policy: TeardownPolicy,
    chosen: dict[int, list[str]],
    by_pid: dict[int, ProcInfo],
    guard: Callable[[ProcInfo], str | None],
) -> list[PortHolder]:
    """Listeners on the ports the next engine needs: engines die with the rest; anything else blocks."""
    blocked = []
    for port, pids in sorted(snap.listeners.items()):
        for pid in pids:
            why = f"listens on port {port}, which the next engine needs"
            p = by_pid.get(pid) if pid is not None else None
            if p is None:
                blocked.append(PortHolder(port, pid, "?"))
            elif pid in chosen:
                chosen[pid].append(why)
            elif guard(p) is None and (
                p.ppid in chosen
                or any(c.ppid == p.pid and c.pid in chosen for c in snap.processes)
                or _matches(p.title, (*policy.front_end_titles, *policy.engine_titles))
            ):
                chosen[p.pid] = [f"{why} (an engine front end)"]
            else:
                blocked.append(PortHolder(port, pid, p.title))
    return blocked


def plan(snap: Snapshot, policy: TeardownPolicy) -> TeardownPlan:
    by_pid = {p.pid: p for p in snap.processes}
    ancestors = _ancestors(snap.self_pid, by_pid)
    scope = _Scope(snap, policy.gpus)

    def guard(p: ProcInfo) -> str | None:
        return _protection(p, snap, ancestors, policy)

    chosen: dict[int, list[str]] = {}
    spared: list[Spared] = []
    for p in snap.processes:
        reasons = _reasons(p, snap, policy, scope)
        protected = guard(p)
        if reasons and protected:
            spared.append(Spared(p.pid, p.title, f"{protected} (would be a victim: {'; '.join(reasons)})"))
        elif reasons:
            chosen[p.pid] = reasons
        elif scope.only_outside(p):
            spared.append(Spared(p.pid, p.title, protected or scope.outside_reason(p)))
        elif p.open_devices or p.mapped_devices:
            spared.append(Spared(p.pid, p.title, protected or NVML_READER))
    # Children of victims go with them (a worker pool's helpers, a shell wrapper's engine), unless they
    # hold only GPUs outside the teardown (spared above, with that reason).
    changed = True
    while changed:
        changed = False
        for p in snap.processes:
            if p.pid not in chosen and p.ppid in chosen and p.pid != p.ppid:
                if guard(p) is None and not scope.only_outside(p):
                    chosen[p.pid] = [f"child of victim {p.ppid}"]
                    changed = True
    blocked = _port_holders(snap, policy, chosen, by_pid, guard)

    victims = [
        Victim(
            pid,
            by_pid[pid].title,
            tuple(r),
            not _from_managed_unit(by_pid[pid], snap),
            scope.mib.get(pid),
            by_pid[pid].started,
            _is_orphan(by_pid[pid], by_pid, policy),
            tuple(sorted(scope.held(by_pid[pid]))),
        )
        for pid, r in sorted(chosen.items())
    ]
    refused = [v for v in victims if v.foreign] if policy.foreign == "refuse" else []
    remove, keep = plan_shm(snap.shm, policy.shm_patterns, victim_pids=set(chosen))
    return TeardownPlan(victims, spared, remove, keep, policy.gpus, refused, blocked, snap.gpu_error)


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
