"""Gathers what `k25-ctl doctor` judges (doctor.py): the driver's facts, the health watch's readings, the
engine units' LimitMEMLOCK, /dev/shm, RAM, the profiles' engines and ports, the clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from daemon.core.errors import K25Error
from daemon.core.profiles import Profile, ProfileSet
from daemon.engines import engine_for
from daemon.health.doctor import Check, DoctorInput, EngineSeen, MemlockNeed, checks
from daemon.health.watch import HealthWatch
from daemon.host.host_facts import HostFacts
from daemon.host.systemd import SystemdPort
from daemon.teardown.execute import Teardown


@dataclass(frozen=True)
class DoctorLimits:
    expected_gpus: int
    shm_dir: Path
    shm_min_bytes: int
    park_budget: int


class Doctor:
    def __init__(
        self,
        *,
        facts: HostFacts,
        health: HealthWatch,
        systemd: SystemdPort,
        teardown: Teardown,
        profiles: Callable[[], ProfileSet],
        managed_units: Callable[[], tuple[str, ...]],
        engine_version: Callable[[str], str | None],
        weight_bytes: Callable[[Profile], int],
        available: Callable[[], int],
        limits: DoctorLimits,
    ) -> None:
        self.facts = facts
        self.health = health
        self.systemd = systemd
        self.teardown = teardown
        self.profiles = profiles
        self.managed_units = managed_units
        self.engine_version = engine_version
        self.weight_bytes = weight_bytes
        self.available = available
        self.limits = limits

    async def run(self) -> list[Check]:
        lim, profiles = self.limits, self.profiles()
        facts = await asyncio.to_thread(self.facts.driver)
        await self.health.read()  # afresh: the doctor is asked for now, not for a second ago
        plan = await self.teardown.plan(
            managed_units=self.managed_units(),
            ports=tuple(lp.profile.port for lp in profiles.valid.values()),
            full=False,
        )
        return checks(
            DoctorInput(
                facts=facts,
                expected_gpus=lim.expected_gpus,
                readings=list(self.health.readings.values()),
                health=dict(self.health.states),
                shm_bytes=await asyncio.to_thread(self.facts.shm_bytes, lim.shm_dir),
                shm_min_bytes=lim.shm_min_bytes,
                clock_synced=await asyncio.to_thread(self.facts.clock_synced),
                mem_available=self.available(),
                park_budget=lim.park_budget,
                memlock=await self._memlock(profiles),
                engines=[
                    *(EngineSeen(n, self.engine_version(n), None) for n in sorted(profiles.valid)),
                    *(EngineSeen(p.name, None, str(p)) for p in profiles.invalid),
                ],
                ports=[str(b) for b in plan.port_blocked],
            )
        )

    async def _memlock(self, profiles: ProfileSet) -> list[MemlockNeed]:
        out = []
        for name, lp in sorted(profiles.valid.items()):
            p = lp.profile
            if not engine_for(p).park_pins_weights(p):
                continue
            try:
                limit = (await self.systemd.state(p.unit)).limit_memlock
            except K25Error:
                limit = None
            need = await asyncio.to_thread(self.weight_bytes, p)
            out.append(MemlockNeed(name, p.unit, limit, need or None))
        return out
