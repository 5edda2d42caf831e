"""What the host has right now: its profiles (valid and invalid, read afresh at each switch and reload)
and the engine units' states, as the host's own dataclasses (the API makes response models of them)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from daemon.core.errors import K25Error
from daemon.core.profiles import LoadedProfile, ProfileSet
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.host.systemd import SystemdPort, UnitState
from daemon.installed.engines import InstalledEngines, ProfileEngine
from daemon.warming.warmer import Residency

log = logging.getLogger("k25.profiles")


@dataclass(frozen=True)
class UnitInfo:
    unit: str
    active_state: str | None = None
    sub_state: str | None = None
    error: str | None = None  # the state could not be read


@dataclass(frozen=True)
class ProfileEntry:
    """A profile as GET /profiles shows it: the loaded file (None when invalid) and what the host knows
    of it: its rendered argv, its unit's state, how much of its weights is in the page cache."""

    name: str
    file: str
    loaded: LoadedProfile | None
    error: str | None = None  # an invalid profile: each problem with its file and key
    argv: list[str] | None = None
    unit_state: UnitInfo | None = None
    default: bool = False
    residency: Residency | None = None
    installed: ProfileEngine | None = None  # its engine as installed (None: not asked)


class Inventory:
    def __init__(self, settings: Settings, systemd: SystemdPort, installed: InstalledEngines) -> None:
        self._settings = settings
        self._systemd = systemd
        self.installed = installed  # each profile's engine as installed, asked at each read
        self.profiles = ProfileSet()
        self._variants: dict[str, LoadedProfile] = {}  # a running sweep's derived profiles
        self._asking: asyncio.Task[None] | None = None  # the engines asked after the start (start_asking)

    def hold_variants(self, variants: list[LoadedProfile]) -> None:
        """A sweep's derived profiles are profiles like the others until it ends (switched to, watched,
        warmed, listed); they are never files."""
        self._variants = {lp.profile.name: lp for lp in variants}
        self.profiles = ProfileSet(self.profiles.valid | self._variants, self.profiles.invalid)

    def release_variants(self) -> None:
        gone = set(self._variants)
        self._variants = {}
        valid = {n: lp for n, lp in self.profiles.valid.items() if n not in gone}
        self.profiles = ProfileSet(valid, self.profiles.invalid)

    def current(self) -> ProfileSet:
        """The profiles as last read (the serving watch and the warms follow these)."""
        return self.profiles

    def engine_version(self, name: str) -> str | None:
        """The profile's engine version as installed, as its last read found it (None: not known)."""
        seen = self.installed.seen(name)
        return seen.installed.version if seen else None

    def units(self) -> tuple[str, ...]:
        """The managed units: those of the valid profiles."""
        return tuple(dict.fromkeys(lp.profile.unit for lp in self.profiles.valid.values()))

    async def reload_profiles(self, *, ask_engines: bool = True) -> ProfileSet:
        """Read the profiles folder afresh (each switch does, and reload); report what changed.
        `ask_engines=False`: the installed engines' flags from the cache only (the daemon's start, which
        must not wait for an engine's help: `ask_engines` asks them afterwards)."""
        s = self._settings
        before = {n: lp.sha256 for n, lp in self.profiles.valid.items() if n not in self._variants}
        load = functools.partial(
            load_checked_profiles,
            s.profiles_path,
            check_paths=s.check_model_paths,
            service_port=s.service_port,
        )
        fresh = await asyncio.to_thread(self.installed.load, lambda extra: load(extra=extra), ask=ask_engines)
        now = {n: lp.sha256 for n, lp in fresh.valid.items()}
        if now != before:
            changed = sorted(n for n in now if before.get(n) != now[n])
            log.info("profiles: %d valid (changed or new: %s)", len(now), ", ".join(changed) or "none")
        known = {str(p) for p in self.profiles.invalid}
        for bad in fresh.invalid:
            if str(bad) not in known:
                log.error("invalid profile: %s", bad)
        fresh.valid |= self._variants
        self.profiles = fresh
        return fresh

    def start_asking(self) -> None:
        """After the daemon's start, in the background: ask the engines its first read did not know (that
        read took the cache only), then read the profiles again: what the engines refuse is invalid from
        then on, and logged."""
        if self.installed.pending() and self._asking is None:
            self._asking = asyncio.create_task(self._ask_engines(), name="ask-engines")

    async def _ask_engines(self) -> None:
        began = time.monotonic()
        try:
            await self.reload_profiles()
        except Exception:  # a read that fails here is read again at the next switch or reload
            log.exception("asking the installed engines for their flags failed")
            return
        log.info("installed engines asked for their flags in %.1fs", time.monotonic() - began)

    async def close(self) -> None:
        if self._asking is not None:
            self._asking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._asking

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
    ) -> list[ProfileEntry]:
        default = self._settings.default_profile
        valid = [
            ProfileEntry(
                n,
                str(lp.file),
                lp,
                None,
                engine_for(lp.profile).argv(lp.profile),
                units.get(n),
                n == default,
                residency.get(n),
                self.installed.seen(n),
            )
            for n, lp in sorted(self.profiles.valid.items())
        ]
        invalid = [ProfileEntry(bad.name, str(bad.file), None, str(bad)) for bad in self.profiles.invalid]
        return valid + invalid
