"""The activation transaction: stop -> teardown -> start -> loading -> probing -> active, every phase an
event persisted as it happens; on failure, timeout or cancel: the journal excerpt, stop, teardown, and one
rollback to the last known-good profile as a linked run; if that fails too, `degraded`. One at a time."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

from daemon.bringup import BringUpFailed, bring_up
from daemon.engines import engine_for
from daemon.engines.base import LogEvent
from daemon.errors import Busy, InvalidInput, K25Error, NotFound, Refused
from daemon.host.journal import JournalPort
from daemon.host.systemd import SystemdPort
from daemon.hoststate import HostState, StateHub
from daemon.profiles import LoadedProfile, ProfileSet
from daemon.readiness import Prober
from daemon.store.queries import Store
from daemon.teardown_exec import Teardown

EXCERPT_LINES = 30


class SwitchFailed(K25Error):
    def __init__(self, reason: str, excerpt: str = "", needs_reset: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.excerpt, self.needs_reset = reason, excerpt, needs_reset


class Switcher:
    def __init__(
        self,
        *,
        profiles: Callable[[], ProfileSet],
        systemd: SystemdPort,
        journal: JournalPort,
        teardown: Teardown,
        store: Store,
        prober: Prober,
        hub: StateHub,
        default_profile: str,
        stop_timeout_s: float,
    ) -> None:
        self._profiles, self.systemd, self.journal, self.teardown = profiles, systemd, journal, teardown
        self.store, self.prober, self.hub = store, prober, hub
        self.default_profile, self.stop_timeout_s = default_profile, stop_timeout_s
        self._task: asyncio.Task[None] | None = None
        self._run_id: int | None = None
        self._rolling_back = False
        self._admission = asyncio.Lock()

    # -- requests -------------------------------------------------------------------------------------

    def _profile(self, name: str) -> LoadedProfile:
        lp = self._profiles().get(name)
        if lp is None:
            raise NotFound(f"no valid profile {name!r}")
        return lp

    async def activate(self, name: str, *, force: bool = False) -> int | None:
        """Start a switch; returns its run id, or None when `name` is already active and healthy."""
        lp = self._profile(name)
        async with self._admission:  # check and claim in one step: two requests never both get through
            if self._task is not None:
                raise Busy(f"run {self._run_id} (switch to {self.hub.status.target_profile}) is in progress")
            if self.hub.status.state is HostState.NEEDS_RESET:
                raise Refused(f"the host needs a GPU reset or reboot: {self.hub.status.reason}")
            st = self.hub.status
            if not force and st.state is HostState.ACTIVE and st.active_profile == name:
                if (await self.systemd.state(lp.profile.unit)).is_active:
                    return None
            run_id = await self._new_run("switch", lp, from_profile=st.active_profile)
            self._run_id = run_id
            self._task = asyncio.create_task(self._transaction(run_id, lp, st.active_profile))
            return run_id

    async def wait(self, run_id: int) -> None:
        """Until the run (and any rollback it started) has ended."""
        task = self._task
        if task is not None and self._run_id == run_id:
            await asyncio.shield(task)

    async def cancel(self, run_id: int) -> None:
        if self._task is None or self._run_id != run_id:
            raise InvalidInput(f"run {run_id} is not in progress")
        if self._rolling_back:
            raise Busy(f"run {run_id} is already rolling back")
        self._task.cancel()

    # -- the transaction -------------------------------------------------------------------------------

    async def _new_run(
        self, kind: str, lp: LoadedProfile, *, from_profile: str | None, parent: int | None = None
    ) -> int:
        p = lp.profile
        return await asyncio.to_thread(
            self.store.create_run,
            kind=kind,
            profile=p.name,
            from_profile=from_profile,
            parent_id=parent,
            argv=engine_for(p).argv(p),
            profile_sha256=lp.sha256,
            unit=p.unit,
        )

    async def _event(self, run_id: int, phase: str, detail: str = "", **fields: Any) -> None:
        eid = await asyncio.to_thread(
            self.store.add_event, run_id=run_id, phase=phase, detail=detail, **fields
        )
        self.hub.publish_run(
            run_id, {"id": eid, "phase": phase, "detail": detail, "at": time.time(), **fields}
        )

    async def _finish(self, run_id: int, outcome: str, **fields: Any) -> None:
        eid = await asyncio.to_thread(self.store.finish_run, run_id=run_id, outcome=outcome, **fields)
        detail = fields.get("error") or ""
        self.hub.publish_run(
            run_id, {"id": eid, "phase": outcome, "detail": detail, "at": time.time(), "final": True}
        )

    async def _transaction(self, run_id: int, lp: LoadedProfile, previous: str | None) -> None:
        try:
            try:
                await self._switch(run_id, lp)
                return
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                failure = SwitchFailed("cancelled by request")
                outcome = "cancelled"
            except SwitchFailed as e:
                failure, outcome = e, "failed"
            except K25Error as e:
                failure, outcome = SwitchFailed(str(e)), "failed"
            self._rolling_back = True
            await self._undo(run_id, lp, outcome, failure)
            if failure.needs_reset:
                return
            target = self._rollback_target(lp.profile.name, previous)
            if target is None:
                self.hub.update(
                    state=HostState.DEGRADED,
                    active_profile=None,
                    run_id=run_id,
                    phase=None,
                    reason=f"{lp.profile.name}: {failure.reason}; no known-good profile to return to",
                )
                return
            await self._rollback(run_id, target, failure)
        finally:
            self._task, self._run_id, self._rolling_back = None, None, False

    def _rollback_target(self, failed: str, previous: str | None) -> LoadedProfile | None:
        profiles = self._profiles()
        for name in (previous, self.store.last_good_profile(), self.default_profile):
            if name and name != failed and (lp := profiles.get(name)) is not None:
                return lp
        return None

    async def _rollback(self, parent: int, lp: LoadedProfile, failure: SwitchFailed) -> None:
        rb = await self._new_run("rollback", lp, from_profile=None, parent=parent)
        await self._event(parent, "rollback", f"rolling back to {lp.profile.name} (run {rb})")
        try:
            await self._switch(rb, lp)
        except (SwitchFailed, K25Error) as e:
            second = e if isinstance(e, SwitchFailed) else SwitchFailed(str(e))
            await self._undo(rb, lp, "failed", second)
            if not second.needs_reset:
                self.hub.update(
                    state=HostState.DEGRADED,
                    active_profile=None,
                    run_id=rb,
                    phase=None,
                    reason=f"switch failed ({failure.reason}); rollback to {lp.profile.name} failed "
                    f"({second.reason}); no engine runs, no further attempt",
                )

    async def _switch(self, run_id: int, lp: LoadedProfile) -> None:
        p = lp.profile
        self.hub.update(
            state=HostState.SWITCHING,
            target_profile=p.name,
            run_id=run_id,
            phase="stop",
            progress_percent=None,
            progress_done=None,
            progress_total=None,
            reason=None,
        )
        await self._stop_and_teardown(run_id, gpus=tuple(p.gpus))

        async def on_phase(phase: str, detail: str) -> None:
            self.hub.update(phase=phase)
            await self._event(run_id, phase, detail)

        async def on_progress(ev: LogEvent) -> None:
            self.hub.update(progress_percent=ev.percent, progress_done=ev.done, progress_total=ev.total)
            await self._event(
                run_id,
                "loading",
                f"{ev.percent}% ({ev.done}/{ev.total})",
                progress_percent=ev.percent,
                progress_done=ev.done,
                progress_total=ev.total,
            )

        with contextlib.suppress(K25Error):
            await self.systemd.reset_failed(p.unit)  # a unit left failed by an earlier run may start again
        try:
            seen = await bring_up(
                p,
                systemd=self.systemd,
                journal=self.journal,
                prober=self.prober,
                on_phase=on_phase,
                on_progress=on_progress,
            )
        except BringUpFailed as e:
            raise SwitchFailed(e.reason, await self._excerpt(p.unit, e.errors)) from e
        await self._finish(run_id, "active", load_seconds=seen.load_seconds)
        self.hub.update(
            state=HostState.ACTIVE, active_profile=p.name, target_profile=None, run_id=None, phase=None
        )

    async def _stop_and_teardown(self, run_id: int, gpus: tuple[int, ...] | None) -> None:
        units = tuple(lp.profile.unit for lp in self._profiles().valid.values())
        cgroups: dict[str, str] = {}
        for unit in units:
            st = await self.systemd.state(unit)
            if not st.is_down:
                cgroups[unit] = st.control_group
                out = await self.systemd.stop(unit, within_s=self.stop_timeout_s)
                how = " (SIGKILL after TimeoutStopSec)" if out.stop_escalated else ""
                await self._event(
                    run_id, "stop", f"stopped {unit}: job {out.job_result}{how} in {out.seconds:.1f}s"
                )
        if not cgroups:
            await self._event(run_id, "stop", "no engine unit was running")
        self.hub.update(phase="teardown")
        await self._event(run_id, "teardown", "planning")
        report = await self.teardown.run(gpus, unit_cgroups=cgroups, managed_units=units)
        data = report.to_dict()
        await asyncio.to_thread(self.store.save_teardown, run_id=run_id, ok=report.ok, report=data)
        killed = [f"{o.pid} {o.title} ({'+'.join(o.signals)})" for o in report.processes]
        await self._event(
            run_id,
            "teardown",
            json.dumps(
                {"killed": killed, "shm_removed": report.shm_removed, "steps": report.steps, "ok": report.ok}
            ),
        )
        if report.needs_reset:
            self.hub.update(state=HostState.NEEDS_RESET, active_profile=None, phase=None, reason=report.error)
            raise SwitchFailed(report.error or "needs_reset", needs_reset=True)
        if not report.ok:
            raise SwitchFailed(f"teardown did not leave the GPUs clean: {report.error}")

    async def _undo(self, run_id: int, lp: LoadedProfile, outcome: str, failure: SwitchFailed) -> None:
        """After a failed start: stop the target, tear down, record the run's end with its excerpt."""
        await self._event(run_id, outcome, failure.reason)
        excerpt = failure.excerpt or failure.reason
        if not failure.needs_reset:
            try:
                await self._stop_and_teardown(run_id, tuple(lp.profile.gpus))
            except SwitchFailed as e:
                failure.needs_reset = e.needs_reset
                excerpt += f"\n[cleanup] {e.reason}"
        error = f"{failure.reason}\n{excerpt}" if failure.excerpt else failure.reason
        await self._finish(run_id, outcome, error=error)

    async def _excerpt(self, unit: str, errors: list[str]) -> str:
        try:
            tail = [r.message for r in await self.journal.tail(unit, EXCERPT_LINES)]
        except (OSError, K25Error):
            tail = []
        lines = [*errors, *(line for line in tail if line not in errors)]
        return "\n".join(lines[-EXCERPT_LINES:])

    # -- after a daemon restart ------------------------------------------------------------------------

    async def reconcile(self) -> dict[str, Any]:
        """Unfinished runs become `interrupted`; the active profile is whichever managed unit systemd says
        is active; stray engine processes are reported, not killed."""
        interrupted = await asyncio.to_thread(self.store.mark_interrupted)
        active = []
        for name, lp in self._profiles().valid.items():
            with contextlib.suppress(K25Error):
                if (await self.systemd.state(lp.profile.unit)).active_state in ("active", "activating"):
                    active.append(name)
        last_good = await asyncio.to_thread(self.store.last_good_profile)
        chosen = last_good if last_good in active else (active[0] if active else None)
        if chosen:
            self.hub.update(state=HostState.ACTIVE, active_profile=chosen, reason=None)
        else:
            self.hub.update(state=HostState.IDLE, active_profile=None)
        plan = await self.teardown.plan(
            managed_units=tuple(lp.profile.unit for lp in self._profiles().valid.values())
        )
        strays = [
            {"pid": v.pid, "title": v.title, "reasons": list(v.reasons)} for v in plan.victims if v.foreign
        ]
        return {"interrupted": interrupted, "active_units": active, "adopted": chosen, "strays": strays}
