"""Parking's guards, pure: whether a switch may park the engine it leaves (the target must fit beside it on
the GPUs and must not need its port; its weights must fit in host RAM), each refusal with its figures."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from daemon.core.profiles import Profile
from daemon.host.gpu import GpuInfo

GIB = 1024**3


def port_problem(target: Profile, parked: Profile) -> str | None:
    """A sleeping server keeps listening: a target on the same port cannot start beside it."""
    if target.port != parked.port:
        return None
    return f"{target.name} needs port {target.port}, which the sleeping server of {parked.name} holds"


def fit_problem(
    target: Profile,
    fraction: float | None,
    gpus: list[GpuInfo],
    idle_mib: Mapping[int, int],
    parked_mib: Mapping[int, int],
) -> str | None:
    """The target takes `fraction` of each of its GPUs' total memory at start (vLLM checks that much is
    free, and fails otherwise); beside a parked engine only total - idle - its residual is free. None: it
    fits (or it sizes itself from what is free: no fraction)."""
    if fraction is None:
        return None
    for g in gpus:
        held = parked_mib.get(g.index, 0)
        if g.index not in target.gpus or not held:
            continue
        need = math.ceil(fraction * g.memory_total_mib)
        free = g.memory_total_mib - idle_mib.get(g.index, 0) - held
        if need > free:
            return (
                f"{target.name} needs {need} MiB on GPU {g.index} ({fraction:g} x {g.memory_total_mib} MiB) "
                f"but only {free} MiB would be free beside the parked engine ({held} MiB held, "
                f"{idle_mib.get(g.index, 0)} MiB idle)"
            )
    return None


def ram_problem(weight_bytes: int, mem_available: int, reserve: int) -> str | None:
    """A level-1 sleep pins the weights in host RAM. MemAvailable counts the page cache the kernel can drop
    (not tmpfs, not what it cannot reclaim), and pinned pages cannot be swapped: with less than the
    weights plus the reserve available, a pinned allocation can hang the host."""
    room = mem_available - reserve
    if weight_bytes <= room:
        return None
    return (
        f"the weights ({weight_bytes / GIB:.1f} GiB) would be pinned in host RAM, but MemAvailable is "
        f"{mem_available / GIB:.1f} GiB and park_ram_reserve_bytes keeps {reserve / GIB:.1f} GiB free: "
        f"room for {max(0, room) / GIB:.1f} GiB"
    )


def max_parked_problem(parked: list[str], max_parked: int | None) -> str | None:
    """An operator's cap on the count (None: the RAM budget alone limits it; 0: parking is off)."""
    if max_parked is None or len(parked) < max_parked:
        return None
    if not parked:
        return "max_parked = 0: parking is off on this host"
    return f"max_parked = {max_parked} and {', '.join(parked)} is parked already"


@dataclass(frozen=True)
class Pinned:
    """A parked engine as the RAM budget sees it."""

    profile: str
    since: float  # when it was parked: its last use
    ram_bytes: int


def evictions(parked: list[Pinned], need: int, budget: int) -> list[Pinned]:
    """The parked engines to stop, least recently used first, so that `need` more bytes of pinned weights
    fit in the budget beside the rest; NoRoom when even with none parked they would not."""
    if need > budget:
        raise NoRoom(
            f"the weights ({need / 1024**2:.1f} MiB) would be pinned in host RAM, but "
            f"park_ram_budget_bytes is {budget / 1024**2:.1f} MiB"
        )
    used = sum(p.ram_bytes for p in parked)
    out = []
    for p in sorted(parked, key=lambda p: p.since):
        if used + need <= budget:
            break
        if p.ram_bytes:
            out.append(p)
            used -= p.ram_bytes
    return out


def evictions_for_reserve(
    parked: list[Pinned], chosen: list[Pinned], need: int, available: int, reserve: int
) -> list[Pinned]:
    """More parked engines to stop, least recently used first, so that pinning `need` leaves MemAvailable
    at the reserve or above (what the `chosen` ones free counted); [] where it fits, or where even all of
    them would not make room (then the park is refused: nothing is stopped for nothing)."""
    room = available + sum(p.ram_bytes for p in chosen) - reserve
    rest = [p for p in sorted(parked, key=lambda p: p.since) if p not in chosen and p.ram_bytes]
    if need <= room or need > room + sum(p.ram_bytes for p in rest):
        return []
    out = []
    for p in rest:
        out.append(p)
        room += p.ram_bytes
        if need <= room:
            break
    return out


class NoRoom(Exception):
    """No park fits the RAM budget: the engine is stopped as usual."""
