"""What the host has right now: its profiles (valid and invalid, read afresh at each switch and reload)
and the engine units' states, as the host's own dataclasses (the API makes response models of them)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from daemon.core.errors import K25Error
from daemon.core.profiles import ProfileSet, SpeculativeConfig
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.host.systemd import SystemdPort, UnitState
from daemon.warming.warmer import Residency

log = logging.getLogger("k25.profiles")


@dataclass(frozen=True)
class UnitInfo:
    unit: str
    active_state: str | None = None
    sub_state: str | None = None
    error: str | None = None  # the state could not be read


@dataclass(frozen=True)
class ProfileInfo:
    name: str
    valid: bool
    file: str
    error: str | None = None  # invalid profiles: each problem with its file and key
    description: str | None = None
    engine: str | None = None
    unit: str | None = None
    model: str | None = None
    port: int | None = None
    gpus: list[int] | None = None
    speculative: SpeculativeConfig | None = None
    argv: list[str] | None = None
    sha256: str | None = None
    unit_state: UnitInfo | None = None
    default: bool = False
    warm: str | None = None
    residency: Residency | None = None


class Inventory:
    def __init__(self, settings: Settings, systemd: SystemdPort) -> None:
        self._settings = settings
        self._systemd = systemd
        self.profiles = ProfileSet()

    def current(self) -> ProfileSet:
        """The profiles as last read (the serving watch and the warms follow these)."""
        return self.profiles

    def units(self) -> tuple[str, ...]:
        """The managed units: those of the valid profiles."""
        return tuple(dict.fromkeys(lp.profile.unit for lp in self.profiles.valid.values()))

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

    async def unit_states(self, followed: Mapping[str, UnitState]) -> dict[str, UnitInfo]:
        """From the watch's followers (systemd's change events); D-Bus only for a unit not followed yet."""
        out: dict[str, UnitInfo] = {}
        for name, lp in self.profiles.valid.items():
            try:
                st = followed.get(lp.profile.unit) or await self._systemd.state(lp.profile.unit)
                out[name] = UnitInfo(lp.profile.unit, st.active_state, st.sub_state)
            except K25Error as e:
                out[name] = UnitInfo(lp.profile.unit, error=str(e))
        return out

    def profile_list(
        self, units: dict[str, UnitInfo], residency: Mapping[str, Residency]
    ) -> list[ProfileInfo]:
        out: list[ProfileInfo] = []
        for n, lp in sorted(self.profiles.valid.items()):
            p = lp.profile
            out.append(
                ProfileInfo(
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
                    residency=residency.get(n),
                )
            )
        out += [
            ProfileInfo(name=i.name, valid=False, file=str(i.file), error=str(i))
            for i in self.profiles.invalid
        ]
        return out
