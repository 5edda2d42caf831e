"""After a daemon (re)start: unfinished runs become `interrupted`, the active profile is whichever managed
unit systemd says is active, and stray engine processes are reported, not killed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

from daemon.errors import K25Error
from daemon.host.systemd import SystemdPort
from daemon.hoststate import HostState
from daemon.profiles import ProfileSet
from daemon.recorder import HostAfter, RunRecorder
from daemon.run_types import RunKind
from daemon.switch import ServingHooks
from daemon.teardown import Victim
from daemon.teardown_exec import Teardown

log = logging.getLogger("k25.reconcile")


@dataclass(frozen=True)
class Reconciled:
    interrupted: list[int] = field(default_factory=list)
    active_units: list[str] = field(default_factory=list)
    adopted: str | None = None
    strays: list[Victim] = field(default_factory=list)


async def reconcile(
    profiles: ProfileSet,
    *,
    systemd: SystemdPort,
    teardown: Teardown,
    recorder: RunRecorder,
    serving: ServingHooks,
) -> Reconciled:
    store = recorder.store
    active = []
    for name, lp in profiles.valid.items():
        with contextlib.suppress(K25Error):
            if (await systemd.state(lp.profile.unit)).active_state in ("active", "activating"):
                active.append(name)
    last_good = await asyncio.to_thread(store.last_good_profile)
    chosen = last_good if last_good in active else (active[0] if active else None)
    # The serving run of the engine that still serves carries on; every other unfinished run was cut short.
    open_serving = await asyncio.to_thread(store.open_runs, kind=RunKind.SERVING)
    keep = [r.id for r in open_serving if r.profile == chosen and r.id is not None][-1:]
    interrupted = await asyncio.to_thread(store.mark_interrupted, keep)
    for run_id in interrupted:
        log.warning("run %d: interrupted (the daemon stopped during the run)", run_id)
    recorder.settle(HostAfter(HostState.ACTIVE, chosen) if chosen else HostAfter(HostState.IDLE))
    if chosen:
        await serving.begin(profiles.valid[chosen], parent=None, adopt_run=keep[0] if keep else None)
    plan = await teardown.plan(managed_units=tuple(lp.profile.unit for lp in profiles.valid.values()))
    strays = [v for v in plan.victims if v.foreign]
    for v in strays:
        log.warning(
            "stray engine process pid %d (%s): %s; not killed", v.pid, v.title[:80], "; ".join(v.reasons)
        )
    log.info("reconciled: active units %s, adopted %s", active or "none", chosen or "none")
    return Reconciled(interrupted, active, chosen, strays)
