"""What the host has right now: profiles (valid and invalid), the engine units' states, the GPUs."""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Any

from daemon.engines import engine_for
from daemon.errors import K25Error
from daemon.host.gpu import GpuView
from daemon.host.systemd import SystemdPort
from daemon.profiles import ProfileSet, load_profiles
from daemon.settings import Settings


class Inventory:
    def __init__(self, settings: Settings, systemd: SystemdPort, gpus: GpuView) -> None:
        self._settings = settings
        self._systemd = systemd
        self._gpus = gpus
        self.profiles = ProfileSet()

    @property
    def gpu_view(self) -> GpuView:
        return self._gpus

    async def reload_profiles(self) -> ProfileSet:
        s = self._settings
        self.profiles = await asyncio.to_thread(
            load_profiles, s.profiles_path, check_paths=s.check_model_paths
        )
        return self.profiles

    async def unit_states(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for name, lp in self.profiles.valid.items():
            try:
                st = await self._systemd.state(lp.profile.unit)
                out[name] = {
                    "unit": lp.profile.unit,
                    "active_state": st.active_state,
                    "sub_state": st.sub_state,
                }
            except K25Error as e:
                out[name] = {"unit": lp.profile.unit, "error": str(e)}
        return out

    async def gpus(self) -> list[dict[str, Any]]:
        return [asdict(g) for g in await asyncio.to_thread(self._gpus.gpus)]

    def profile_list(self, units: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for n, lp in sorted(self.profiles.valid.items()):
            p = lp.profile
            spec = p.speculative.model_dump() if p.speculative else None
            out.append(
                {
                    "name": n,
                    "valid": True,
                    "description": p.description,
                    "engine": p.engine,
                    "unit": p.unit,
                    "model": p.model,
                    "port": p.port,
                    "gpus": p.gpus,
                    "speculative": spec,
                    "argv": engine_for(p).argv(p),
                    "file": str(lp.file),
                    "sha256": lp.sha256,
                    "unit_state": units.get(n),
                    "default": n == self._settings.default_profile,
                }
            )
        for inv in self.profiles.invalid:
            out.append({"name": inv.name, "valid": False, "file": str(inv.file), "error": str(inv)})
        return out
