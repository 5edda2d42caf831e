"""What the profile routes call: the profiles as the page and the CLI show them, a reload, the switches
(activate, restore), a warm and an unpark."""

from __future__ import annotations

from daemon.api.answers_view import known_answer_out
from daemon.api.bench_schemas import SwitchPlanIn, SwitchPlanOut
from daemon.api.controllers.runs import RunsController
from daemon.api.host_schemas import HostOut, ParkCostsOut, RatesOut, WayOut
from daemon.api.schemas import AcceptedOut, ProfileOut, ReloadOut, ResidencyOut, RunOut, UnitStateOut
from daemon.core.errors import NotFound
from daemon.parking.service import Parking
from daemon.proving.known_answer import KnownAnswers
from daemon.runs.jobs import Jobs
from daemon.serving.units import UnitFollower
from daemon.status.inventory import Inventory, ProfileEntry
from daemon.switching.preview import SwitchPreviewer
from daemon.switching.transaction import Switcher
from daemon.warming.service import WarmService


class ProfilesController:
    def __init__(
        self,
        *,
        inventory: Inventory,
        units: UnitFollower,
        switcher: Switcher,
        jobs: Jobs,
        warms: WarmService,
        parking: Parking,
        answers: KnownAnswers,
        runs: RunsController,
        previewer: SwitchPreviewer,
        default_profile: str,
    ) -> None:
        self.inventory = inventory
        self.units = units
        self.switcher = switcher
        self.jobs = jobs
        self.warms = warms
        self.parking = parking
        self.answers = answers
        self.runs = runs
        self.previewer = previewer
        self.default_profile = default_profile

    def host(self) -> HostOut:
        """The park rates and each parking profile's ways, from the last residency scan (no scan here)."""
        forecast, scanned = self.parking.forecast, self.warms.residency()
        parking = []
        for name, lp in sorted(self.inventory.current().valid.items()):
            if lp.profile.park and (r := scanned.get(name)) is not None:
                resident = r.percent / 100
                out = [WayOut.model_validate(w) for w in forecast.table(lp.profile, (r.bytes, resident))]
                parking.append(ParkCostsOut(profile=name, weight_bytes=r.bytes, resident=resident, ways=out))
        return HostOut(rates=RatesOut.model_validate(forecast.rates()), parking=parking)

    async def profiles(self) -> list[ProfileOut]:
        units = await self.inventory.unit_states(self.units.unit_states)
        infos = self.inventory.profile_list(units, self.warms.residency())
        known = self.answers.views()
        return [
            profile_out(e).model_copy(
                update={
                    "parked": self.parking.get(e.name) is not None,
                    "known_answer": known_answer_out(e.name, v) if (v := known.get(e.name)) else None,
                }
            )
            for e in infos
        ]

    async def profile(self, name: str) -> ProfileOut:
        for p in await self.profiles():
            if p.name == name:
                return p
        raise NotFound(f"no profile {name!r}")

    async def reload(self) -> ReloadOut:
        fresh = await self.inventory.reload_profiles()
        self.units.follow_units()
        return ReloadOut(valid=sorted(fresh.valid), invalid=[str(p) for p in fresh.invalid])

    async def activate(
        self, name: str, *, force: bool, wait: bool, drain: bool = True
    ) -> AcceptedOut | RunOut:
        run_id = await self.switcher.activate(name, force=force, drain=drain, unhealthy_gpus_ok=force)
        if run_id is None:
            return AcceptedOut(run_id=None, detail="already active")
        if wait:
            await self.jobs.wait(run_id)
            return await self.runs.run(run_id)
        return AcceptedOut(run_id=run_id)

    async def plan_switch(self, req: SwitchPlanIn) -> SwitchPlanOut:
        found = await self.previewer.preview(req.activate, force=req.force, drain=req.drain)
        return SwitchPlanOut.model_validate(found)

    async def warm(self, name: str) -> AcceptedOut:
        return AcceptedOut(run_id=await self.warms.start(name))

    async def restore(self, *, wait: bool, drain: bool = True) -> AcceptedOut | RunOut:
        return await self.activate(self.default_profile, force=False, wait=wait, drain=drain)

    async def unpark(self, name: str) -> RunOut:
        """Stop a parked engine (a run of kind `unpark`) and answer with its run."""
        return await self.runs.run(await self.parking.unpark(name))


def profile_out(e: ProfileEntry) -> ProfileOut:
    if e.loaded is None:
        return ProfileOut(name=e.name, valid=False, file=e.file, error=e.error)
    p = e.loaded.profile
    return ProfileOut(
        name=e.name,
        valid=True,
        file=e.file,
        description=p.description,
        engine=p.engine,
        unit=p.unit,
        model=p.model,
        port=p.port,
        gpus=p.gpus,
        speculative=p.speculative,
        argv=e.argv,
        sha256=e.loaded.sha256,
        unit_state=UnitStateOut.model_validate(e.unit_state) if e.unit_state else None,
        default=e.default,
        warm=p.warm,
        residency=ResidencyOut.model_validate(e.residency) if e.residency else None,
        engine_version=e.installed.installed.version if e.installed else None,
        engine_package=e.installed.installed.distribution if e.installed else None,
        engine_notes=list(e.installed.warnings) if e.installed else [],
    )
