"""What the status routes call: /status (one body per change, StatusView), /ready for balancers, the
host's event stream and /metrics, all from state kept current by events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime

from daemon.api.controllers.runs import RunsController
from daemon.api.http import sse_frame
from daemon.api.schemas import GpuOut, ReadyOut, StatusOut, UnitStateOut
from daemon.api.status_view import StatusView
from daemon.api.teardown_schemas import VictimOut
from daemon.core import redact
from daemon.core.hoststate import HostState, HostStatus, StateHub
from daemon.core.run_types import Phase
from daemon.runs.jobs import Jobs
from daemon.serving.units import UnitFollower
from daemon.serving.watch import ServingWatch
from daemon.status.exporter import K25Collector
from daemon.status.exporter import render as render_metrics
from daemon.status.inventory import Inventory
from daemon.status.sampler import HostSampler


class StatusController:
    def __init__(
        self,
        *,
        hub: StateHub,
        inventory: Inventory,
        sampler: HostSampler,
        watch: ServingWatch,
        units: UnitFollower,
        jobs: Jobs,
        collector: K25Collector,
        runs: RunsController,
    ) -> None:
        self.hub = hub
        self.inventory = inventory
        self.sampler = sampler
        self.watch = watch
        self.units = units
        self.jobs = jobs
        self.collector = collector
        self.runs = runs
        self.view = StatusView(self.status, self._status_marks)
        self._frame: tuple[HostStatus, bytes] | None = None  # the newest /events frame

    async def metrics(self) -> bytes:
        return await asyncio.to_thread(render_metrics, self.collector)

    async def _unit_states(self) -> dict[str, UnitStateOut]:
        states = await self.inventory.unit_states(self.units.unit_states)
        return {name: UnitStateOut.model_validate(u, from_attributes=True) for name, u in states.items()}

    def ready(self, port: int | None) -> ReadyOut:
        """For load balancers, from memory: 200 while the host serves and is in rotation (on `port`)."""
        st = self.hub.status
        if st.state is HostState.SWITCHING:
            return ReadyOut(ready=False, reason="draining" if st.phase == Phase.DRAINING else "switching")
        if st.state is not HostState.ACTIVE:
            return ReadyOut(ready=False, reason=str(st.state))
        serving = self.watch.current()
        where = serving.profile.port if serving is not None else None
        if why := self.jobs.out_of_rotation():
            return ReadyOut(ready=False, profile=st.active_profile, port=where, reason=why)
        if port is not None and port != where:
            why = f"port {port} is not served (active: {st.active_profile} on {where})"
            return ReadyOut(ready=False, profile=st.active_profile, port=where, reason=why)
        return ReadyOut(ready=True, profile=st.active_profile, port=where)

    def _status_marks(self) -> tuple[object, ...]:
        """What GET /status shows changes only with these (compared by value: cheap, a few objects)."""
        s = self.sampler
        hub, inventory = self.hub.status, self.inventory.profiles
        return (
            hub,
            s.gpus,
            s.gpus_at,
            s.gpu_error,
            s.strays,
            self.watch.changes,
            self.units.changes,
            inventory,
        )

    async def status(self) -> StatusOut:
        st = self.hub.status
        run = await self.runs.run(st.run_id) if st.run_id else None
        return StatusOut(
            **asdict(st),
            current_run=run,
            gpus=[GpuOut.model_validate(g) for g in self.sampler.gpus],
            gpus_sampled_at=datetime.fromtimestamp(at, UTC) if (at := self.sampler.gpus_at) else None,
            gpu_error=self.sampler.gpu_error,
            units=await self._unit_states(),
            strays=[VictimOut.model_validate(v) for v in self.sampler.strays],
            serving=self.watch.now(),
        )

    async def host_events(self) -> AsyncIterator[bytes]:
        async for status in self.hub.subscribe():
            yield self._host_frame(status)

    def _host_frame(self, status: HostStatus) -> bytes:
        """A state change as an SSE frame, rendered once and written to every open /events stream."""
        if self._frame is None or self._frame[0] is not status:
            event = status.to_dict() | {"reason": redact.optional_text(status.reason)}
            self._frame = (status, sse_frame(status.state, event))
        return self._frame[1]
