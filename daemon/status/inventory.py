"""What the host has right now: profiles (valid and invalid), the engine units' states, the GPUs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from daemon.api.schemas import GpuOut, ProfileOut, ResidencyOut, UnitStateOut
from daemon.core.errors import K25Error
from daemon.core.profiles import ProfileSet
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.host.systemd import SystemdPort, UnitState
from daemon.status.sampler import HostSampler
from daemon.warming.warmer import Residency

log = logging.getLogger("k25.profiles")


class Inventory:
    def __init__(self, settings: Settings, systemd: SystemdPort) -> None:
        self._settings = settings
        self._systemd = systemd
        self.profiles = ProfileSet()
        self.unit_cache: Callable[[], Mapping[str, UnitState]] = dict
        self.sampler: HostSampler  # set by the app (it needs the teardown)

    async def reload_profiles(self) -> ProfileSet:
        """Read the profiles folder afresh (each switch does, and reload); report what changed."""
        s = self._settings
        before = {n: lp.sha256 for n, lp in self.profiles.valid.items()}
        fresh = await asyncio.to_thread(
            load_checked_profiles, s.profiles_path, check_paths=s.check_model_paths
        )
        now = {n: lp.sha256 for n, lp in fresh.valid.items()}
        if now != before:
            changed = sorted(n for n in now if before.get(n) != now[n])
            log.info("profiles: %d valid (changed or new: %s)", len(now), ", ".join(changed) or "none")
        known = {str(p) for p in self.profiles.invalid}
        for bad in fresh.invalid:
            if str(bad) not in known:
                log.error("invalid profile: %s", bad)
        self.profiles = fresh
        return fresh

    async def unit_states(self) -> dict[str, UnitStateOut]:
        """From the watch's followers (systemd's change events); D-Bus only for a unit not followed yet."""
        out: dict[str, UnitStateOut] = {}
        cached = self.unit_cache()
        for name, lp in self.profiles.valid.items():
            try:
                st = cached.get(lp.profile.unit) or await self._systemd.state(lp.profile.unit)
                out[name] = UnitStateOut(
                    unit=lp.profile.unit, active_state=st.active_state, sub_state=st.sub_state
                )
            except K25Error as e:
                out[name] = UnitStateOut(unit=lp.profile.unit, error=str(e))
        return out

    def gpus(self) -> tuple[list[GpuOut], str | None]:
        """The GPUs as the sampler last saw them, or none and why they cannot be read."""
        return [GpuOut.model_validate(g) for g in self.sampler.gpus], self.sampler.gpu_error

    def profile_list(
        self, units: dict[str, UnitStateOut], residency: dict[str, Residency] | None = None
    ) -> list[ProfileOut]:
        out: list[ProfileOut] = []
        residency = residency or {}
        for n, lp in sorted(self.profiles.valid.items()):
            p = lp.profile
            out.append(
                ProfileOut(
                    name=n,
                    valid=True,
                    description=p.description,
                    engine=p.engine,
                    unit=p.unit,
                    model=p.model,
                    port=p.port,
                    gpus=p.gpus,
                    speculative=p.speculative,
                    argv=engine_for(p).argv(p),
                    file=str(lp.file),
                    sha256=lp.sha256,
                    unit_state=units.get(n),
                    default=n == self._settings.default_profile,
                    warm=p.warm,
                    residency=ResidencyOut.model_validate(r) if (r := residency.get(n)) else None,
                )
            )
        out += [
            ProfileOut(name=i.name, valid=False, file=str(i.file), error=str(i))
            for i in self.profiles.invalid
        ]
        return out
