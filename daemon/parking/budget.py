"""The host-RAM budget for parked engines' pinned weights: every engine that parks at level 1 pins its
weights in host RAM, and as many may sleep at once as their weights fit in the budget. A park that would
not fit stops the least recently parked engines first; one that would not fit even alone is refused (the
engine is stopped as before parking existed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from daemon.core.hoststate import ParkBudget, ParkedInfo
from daemon.core.profiles import Profile
from daemon.parking import guards

GIB = 1024**3


def size(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB // 10 else f"{n / 1024**2:.1f} MiB"


@dataclass(frozen=True)
class RamPlan:
    """What a park pins (bytes; 0: nothing) and which parked engines must be stopped first."""

    ram_bytes: int
    evict: tuple[guards.Pinned, ...] = ()


class RamBudget:
    def __init__(
        self,
        *,
        budget_bytes: int,
        weight_bytes: Callable[[Profile], int],
        mem_available: Callable[[], int],
        reserve_bytes: int,
    ) -> None:
        self.budget_bytes = budget_bytes
        self._weight_bytes = weight_bytes
        self._mem_available = mem_available
        self.reserve_bytes = reserve_bytes

    def of(self, parked: tuple[ParkedInfo, ...]) -> ParkBudget:
        return ParkBudget(self.budget_bytes, sum(p.host_ram_bytes for p in parked))

    async def plan(self, p: Profile, others: list[ParkedInfo]) -> RamPlan:
        """Whether `p`'s weights may be pinned beside `others` (guards.NoRoom or a RAM problem: no)."""
        ram = await asyncio.to_thread(self._weight_bytes, p)
        pinned = [guards.Pinned(o.profile, o.since, o.host_ram_bytes) for o in others]
        evict = guards.evictions(pinned, ram, self.budget_bytes)
        # What the kernel says now, plus what the evictions will give back.
        available = await asyncio.to_thread(self._mem_available) + sum(e.ram_bytes for e in evict)
        if why := guards.ram_problem(ram, available, self.reserve_bytes):
            raise guards.NoRoom(why)
        return RamPlan(ram, tuple(evict))

    def reason(self, p: Profile, plan: RamPlan) -> str:
        """Why a parked engine is stopped for `p`'s park (on the run and in the journal)."""
        return (
            f"least recently used: parking {p.name} pins {size(plan.ram_bytes)} and "
            f"park_ram_budget_bytes ({size(self.budget_bytes)}) holds no more beside it"
        )


def default_budget(configured: int | None, mem_available: int, reserve: int) -> int:
    """park_ram_budget_bytes as set, or what is available at start minus the reserve."""
    return configured if configured is not None else max(0, mem_available - reserve)
