"""After a daemon (re)start: unfinished runs become `interrupted`, the active profile is whichever managed
unit systemd says is active (stray engine processes are the sampler's to report, not to kill)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from daemon.core.errors import K25Error
from daemon.core.hoststate import HostState
from daemon.core.profiles import ProfileSet
from daemon.core.run_types import CutShort, Phase, RunKind
from daemon.host.systemd import SystemdPort
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.store.queries import Store
from daemon.switching.parking import Parking
from daemon.switching.ports import ServingHooks

log = logging.getLogger("k25.reconcile")


STARTING = (Phase.START, Phase.LOADING, Phase.PROBING, Phase.WAKING)  # an engine not yet proven ready


@dataclass(frozen=True)
class Reconciled:
    resume: CutShort | None = None  # its engine runs but was never proven ready: probe it first
    restore: CutShort | None = None  # nothing runs: finish its undo (the known-good profile comes back)


async def reconcile(
    profiles: ProfileSet,
    *,
    systemd: SystemdPort,
    recorder: RunRecorder,
    serving: ServingHooks,
    parking: Parking,
) -> Reconciled:
    store = recorder.store
    parked = await parking.readopt(profiles)  # asleep on purpose: parked again, never taken for active
    active = []
    for name, lp in profiles.valid.items():
        if name in parked:
            continue
        with contextlib.suppress(K25Error):
            if (await systemd.state(lp.profile.unit)).active_state in ("active", "activating"):
                active.append(name)
    last_good = await asyncio.to_thread(store.last_good_profile)
    chosen = last_good if last_good in active else (active[0] if active else None)
    last = await _last_switch(store)
    resume = last if last and last.profile == chosen and last.phase in STARTING else None
    restore = last if last and chosen is None else None
    # The serving run of the engine that still serves carries on; every other unfinished run was cut short.
    open_serving = await asyncio.to_thread(store.open_runs, kind=RunKind.SERVING)
    keep = [r.id for r in open_serving if r.profile == chosen and r.id is not None and not resume][-1:]
    interrupted = await asyncio.to_thread(store.mark_interrupted, keep)
    for run_id in interrupted:
        log.warning("run %d: interrupted (the daemon stopped during the run)", run_id)
    if chosen and not resume:
        recorder.settle(HostAfter(HostState.ACTIVE, chosen))
        await serving.begin(profiles.valid[chosen], parent=None, adopt_run=keep[0] if keep else None)
    else:  # what to do next (resume, restore) is the switcher's: see Switcher.after_restart
        recorder.settle(HostAfter(HostState.IDLE))
    log.info("reconciled: active units %s, adopted %s, parked %s", active or "none", chosen or "none",
             ", ".join(sorted(parked)) or "none")  # fmt: skip
    return Reconciled(resume, restore)


async def _last_switch(store: Store) -> CutShort | None:
    runs = [
        r
        for kind in (RunKind.SWITCH, RunKind.ROLLBACK)
        for r in await asyncio.to_thread(store.open_runs, kind=kind)
    ]
    last = max(runs, key=lambda r: r.id or 0, default=None)
    if last is None or last.id is None or last.profile is None:
        return None
    return CutShort(last.id, RunKind(last.kind), last.profile, last.from_profile, Phase(last.phase))
