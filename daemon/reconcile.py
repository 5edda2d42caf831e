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
    profiles: ProfileSet, *, systemd: SystemdPort, teardown: Teardown, recorder: RunRecorder
) -> Reconciled:
    store = recorder.store
    interrupted = await asyncio.to_thread(store.mark_interrupted)
    for run_id in interrupted:
        log.warning("run %d: interrupted (the daemon stopped during the run)", run_id)
    active = []
    for name, lp in profiles.valid.items():
        with contextlib.suppress(K25Error):
            if (await systemd.state(lp.profile.unit)).active_state in ("active", "activating"):
                active.append(name)
    last_good = await asyncio.to_thread(store.last_good_profile)
    chosen = last_good if last_good in active else (active[0] if active else None)
    recorder.settle(HostAfter(HostState.ACTIVE, chosen) if chosen else HostAfter(HostState.IDLE))
    plan = await teardown.plan(managed_units=tuple(lp.profile.unit for lp in profiles.valid.values()))
    strays = [v for v in plan.victims if v.foreign]
    for v in strays:
        log.warning(
            "stray engine process pid %d (%s): %s; not killed", v.pid, v.title[:80], "; ".join(v.reasons)
        )
    log.info("reconciled: active units %s, adopted %s", active or "none", chosen or "none")
    return Reconciled(interrupted, active, chosen, strays)
