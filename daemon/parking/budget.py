"""The host-RAM budget for parked engines' pinned weights: every engine that parks at level 1 pins its
weights in host RAM, and as many may sleep at once as their weights fit in the budget. A park that would
not fit stops the least recently parked engines first; one that would not fit even alone is refused (the
engine is stopped as before parking existed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
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
    # what forced the evictions: "budget" (park_ram_budget_bytes) or "reserve" (MemAvailable - reserve)
    bound: str = "budget"


class RamBudget:
    def __init__(
        self,
        *,
        budget_bytes: int,
        weight_bytes: Callable[[Profile], int],
        mem_available: Callable[[], int],
        reserve_bytes: int,
        held: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.budget_bytes = budget_bytes
        self.weight_bytes = weight_bytes  # a profile's weight files' size (what a level-1 park pins)
        self._mem_available = mem_available
        self.reserve_bytes = reserve_bytes
        self._held = held  # the RAM ledger: each parked engine's host RAM as last read (parking/ledger.py)

    def of(self, parked: tuple[ParkedInfo, ...]) -> ParkBudget:
        return ParkBudget(self.budget_bytes, sum(p.host_ram_bytes for p in parked))

    async def plan(self, p: Profile, others: list[ParkedInfo]) -> RamPlan:
        """Whether `p`'s weights may be pinned beside `others` (guards.NoRoom or a RAM problem: no), and the
        parked engines to stop first, least recently used first: for the budget, then for the reserve (what
        MemAvailable would leave). What stopping one frees is the RAM ledger's figure of it (its recorded
        weights where the ledger has none)."""
        ram = await asyncio.to_thread(self.weight_bytes, p)
        # The budget counts pinned weights (as recorded); what stopping an engine gives back to
        # MemAvailable is all its processes hold (the ledger's figure).
        pinned = [guards.Pinned(o.profile, o.since, o.host_ram_bytes) for o in others]
        evict = guards.evictions(pinned, ram, self.budget_bytes)
        held = self._held()
        frees = [guards.Pinned(o.profile, o.since, held.get(o.profile, o.host_ram_bytes)) for o in others]
        chosen = [f for f in frees if f.profile in {e.profile for e in evict}]
        available = await asyncio.to_thread(self._mem_available)
        more = guards.evictions_for_reserve(frees, chosen, ram, available, self.reserve_bytes)
        # What the kernel says now, plus what the evictions will give back.
        freed = sum(e.ram_bytes for e in (*chosen, *more))
        if why := guards.ram_problem(ram, available + freed, self.reserve_bytes):
            raise guards.NoRoom(why)
        return RamPlan(ram, (*evict, *more), "reserve" if more else "budget")

    def reason(self, p: Profile, plan: RamPlan) -> str:
        """Why a parked engine is stopped for `p`'s park (on the run and in the journal)."""
        if plan.bound == "reserve":
            return (
                f"least recently used: parking {p.name} pins {size(plan.ram_bytes)} and MemAvailable "
                f"would fall under park_ram_reserve_bytes ({size(self.reserve_bytes)}) beside it"
            )
        return (
            f"least recently used: parking {p.name} pins {size(plan.ram_bytes)} and "
            f"park_ram_budget_bytes ({size(self.budget_bytes)}) holds no more beside it"
        )


def default_budget(configured: int | None, mem_available: int, reserve: int) -> int:
    """park_ram_budget_bytes as set, or what is available at start minus the reserve."""
    return configured if configured is not None else max(0, mem_available - reserve)
