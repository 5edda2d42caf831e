"""The RAM ledger: the host RAM each engine's process tree holds, serving or parked (a parked engine's
pinned backup, and the block a woken vLLM kept), read by the host sampler after each GPU sample. /status
(`ram_held`) and /metrics (`k25_engine_host_ram_bytes`) show it; a change of less than a step is not
published (resident memory moves a little all the time)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from daemon.core.errors import K25Error
from daemon.core.hoststate import HeldRam, StateHub
from daemon.core.profiles import ProfileSet
from daemon.host.memory import ProcessMemory
from daemon.host.systemd import UnitState

STEP_BYTES = 64 * 2**20


class UnitStates(Protocol):
    """What the ledger asks of systemd: a unit's state (its main PID)."""

    async def state(self, unit: str) -> UnitState: ...


class RamLedger:
    def __init__(
        self,
        *,
        memory: ProcessMemory,
        systemd: UnitStates,
        profiles: Callable[[], ProfileSet],
        hub: StateHub,
    ) -> None:
        self.memory = memory
        self.systemd = systemd
        self.profiles = profiles
        self.hub = hub

    async def sample(self) -> None:
        st = self.hub.status
        engines = {p.profile: (p.main_pid, True) for p in st.parked}
        active = self.profiles().valid.get(st.active_profile or "")
        if active is not None and active.profile.name not in engines:
            try:
                unit = await self.systemd.state(active.profile.unit)
            except K25Error:
                unit = None
            if unit is not None and not unit.is_down and unit.main_pid:
                engines[active.profile.name] = (unit.main_pid, False)
        held = await asyncio.to_thread(self._read, engines)
        if _moved(self.hub.status.ram_held, held):
            self.hub.ram_held(held)

    def _read(self, engines: dict[str, tuple[int, bool]]) -> tuple[HeldRam, ...]:
        return tuple(
            HeldRam(name, pid, self.memory.tree_bytes(pid), parked)
            for name, (pid, parked) in sorted(engines.items())
        )


def _moved(before: tuple[HeldRam, ...], now: tuple[HeldRam, ...]) -> bool:
    """Another set of engines, or one whose RAM moved by a step or more."""
    if [(h.profile, h.main_pid, h.parked) for h in before] != [
        (h.profile, h.main_pid, h.parked) for h in now
    ]:
        return True
    return any(abs(a.bytes - b.bytes) >= STEP_BYTES for a, b in zip(before, now, strict=True))
