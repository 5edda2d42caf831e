"""What the API calls: one method per request, over the services (inventory, switcher, store, teardown).
Routes stay thin; this is where a request becomes service calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

from daemon.api.metrics import K25Collector
from daemon.api.metrics import render as render_metrics
from daemon.errors import Busy, NotFound
from daemon.hoststate import HostState, StateHub
from daemon.inventory import Inventory
from daemon.store.queries import FINAL, RunView, Store
from daemon.switch import Switcher
from daemon.teardown_exec import Teardown


class Controller:
    def __init__(
        self,
        *,
        inventory: Inventory,
        switcher: Switcher,
        store: Store,
        teardown: Teardown,
        hub: StateHub,
        default_profile: str,
    ) -> None:
        self.inventory, self.switcher, self.store, self.teardown, self.hub = (
            inventory,
            switcher,
            store,
            teardown,
            hub,
        )
        self.default_profile = default_profile
        self.reconciled: dict[str, Any] = {}
        self.collector = K25Collector(hub, store, inventory.gpu_view)

    async def metrics(self) -> bytes:
        return await asyncio.to_thread(render_metrics, self.collector)

    def _units(self) -> tuple[str, ...]:
        return tuple(lp.profile.unit for lp in self.inventory.profiles.valid.values())

    async def status(self) -> dict[str, Any]:
        st = self.hub.status
        run = await self.run(st.run_id) if st.run_id else None
        return {
            **st.to_dict(),
            "current_run": run,
            "gpus": await self.inventory.gpus(),
            "units": await self.inventory.unit_states(),
            "strays": self.reconciled.get("strays", []),
        }

    async def profiles(self) -> list[dict[str, Any]]:
        return self.inventory.profile_list(await self.inventory.unit_states())

    async def profile(self, name: str) -> dict[str, Any]:
        for p in await self.profiles():
            if p["name"] == name:
                return p
        raise NotFound(f"no profile {name!r}")

    async def activate(
        self, name: str, *, force: bool, wait: bool
    ) -> tuple[int | None, dict[str, Any] | None]:
        run_id = await self.switcher.activate(name, force=force)
        if run_id is not None and wait:
            await self.switcher.wait(run_id)
            return run_id, await self.run(run_id)
        return run_id, None

    async def restore(self, *, wait: bool) -> tuple[int | None, dict[str, Any] | None]:
        return await self.activate(self.default_profile, force=False, wait=wait)

    async def cancel(self, run_id: int) -> dict[str, Any]:
        await self.switcher.cancel(run_id)
        return {"run_id": run_id, "cancelling": True}

    async def run(self, run_id: int) -> dict[str, Any]:
        view = await asyncio.to_thread(self.store.get_run, run_id=run_id)
        if view is None:
            raise NotFound(f"no run {run_id}")
        return run_dict(view)

    async def runs(self, *, profile: str | None, limit: int) -> list[dict[str, Any]]:
        rows = await asyncio.to_thread(self.store.list_runs, profile=profile, limit=limit)
        return [run_dict(RunView(r, [], [])) | {"events": None, "teardowns": None} for r in rows]

    async def run_events(self, run_id: int) -> AsyncIterator[dict[str, Any]]:
        """The run's stored events, then its live ones until it ends."""
        with self.hub.follow_run(run_id) as live:
            view = await asyncio.to_thread(self.store.get_run, run_id=run_id)
            if view is None:
                raise NotFound(f"no run {run_id}")
            last = 0
            for e in view.events:
                last = e.id or last
                yield {
                    "id": e.id,
                    "phase": e.phase,
                    "detail": e.detail,
                    "at": e.at.isoformat(),
                    "run_id": run_id,
                }
            if view.run.outcome in FINAL:
                return
            while True:
                event = await live.get()
                if event["id"] <= last:
                    continue
                yield event | {"run_id": run_id}
                if event.get("final"):
                    return

    async def host_events(self) -> AsyncIterator[dict[str, Any]]:
        async for status in self.hub.subscribe():
            yield status.to_dict()

    async def teardown_plan(self) -> dict[str, Any]:
        return asdict(await self.teardown.plan(managed_units=self._units()))

    async def run_teardown(self) -> dict[str, Any]:
        """Maintenance teardown: only when no engine should run (the host is idle or degraded)."""
        if self.hub.status.state not in (HostState.IDLE, HostState.DEGRADED):
            raise Busy(f"the host is {self.hub.status.state}: stop the engine (or switch) instead")
        run_id = await asyncio.to_thread(self.store.create_run, kind="teardown", profile=None)
        report = await self.teardown.run(managed_units=self._units())
        data = report.to_dict()
        await asyncio.to_thread(self.store.save_teardown, run_id=run_id, ok=report.ok, report=data)
        await asyncio.to_thread(
            self.store.finish_run, run_id=run_id, outcome="ok" if report.ok else "failed", error=report.error
        )
        if report.needs_reset:
            self.hub.update(state=HostState.NEEDS_RESET, reason=report.error)
        return {"run_id": run_id, "report": data}


def run_dict(view: RunView) -> dict[str, Any]:
    r = view.run
    return {
        "id": r.id,
        "kind": r.kind,
        "profile": r.profile,
        "from_profile": r.from_profile,
        "outcome": r.outcome,
        "phase": r.phase,
        "started_at": r.started_at.isoformat(),
        "ended_at": r.ended_at.isoformat() if r.ended_at else None,
        "load_seconds": r.load_seconds,
        "progress": {"percent": r.progress_percent, "done": r.progress_done, "total": r.progress_total},
        "error": r.error,
        "parent_id": r.parent_id,
        "unit": r.unit,
        "argv": json.loads(r.argv) if r.argv else None,
        "profile_sha256": r.profile_sha256,
        "events": [{"at": e.at.isoformat(), "phase": e.phase, "detail": e.detail} for e in view.events],
        "teardowns": [{"id": t.id, "ok": t.ok, "report": json.loads(t.report)} for t in view.teardowns],
    }
