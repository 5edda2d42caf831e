"""After a daemon (re)start: unfinished runs become `interrupted`, the active profile is whichever managed
unit systemd says is active (stray engine processes are the sampler's to report, not to kill). A sweep's
variant still running is stopped, and the profile the sweep was to restore comes back: its variants are
profiles only while the sweep runs, so nothing else would ever stop it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from daemon.core.errors import K25Error
from daemon.core.hoststate import HostState
from daemon.core.profiles import VARIANT_UNITS, ProfileSet
from daemon.core.run_types import CutShort, Phase, RunKind
from daemon.host.systemd import SystemdPort
from daemon.parking.service import Parking
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.store.queries import Store
from daemon.switching.contracts import ServingHooks

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
    stop_timeout_s: float,
) -> Reconciled:
    store = recorder.store
    parked = await parking.readopt(profiles)  # asleep on purpose: parked again, never taken for active
    variants = await _stop_variants(profiles, systemd, stop_timeout_s)
    active = []
    for name, lp in profiles.valid.items():
        if name in parked:
            continue
        with contextlib.suppress(K25Error):
            if (await systemd.state(lp.profile.unit)).is_up:
                active.append(name)
    last_good = await asyncio.to_thread(store.last_good_profile)
    chosen = last_good if last_good in active else (active[0] if active else None)
    last = await _last_switch(store)
    # An experiment the restart cut short, to restore: what it measured must not go on serving production.
    cut_exp = await _experiment_cut(store, profiles, last, chosen, variants)
    if cut_exp is not None:
        chosen = None
    resume = last if last and last.profile == chosen and last.phase in STARTING else None
    restore = cut_exp or (last if last and chosen is None else None)
    # The serving run of the engine that still serves carries on; every other unfinished run was cut short.
    open_serving = await asyncio.to_thread(store.open_runs, kind=RunKind.SERVING)
    keep = [r.id for r in open_serving if r.profile == chosen and r.id is not None and not resume][-1:]
    interrupted = await asyncio.to_thread(store.mark_interrupted, keep)
    for run_id in interrupted:
        log.warning("run %d: interrupted (the daemon stopped during the run)", run_id)
    if chosen and not resume:
        recorder.settle(HostAfter(HostState.ACTIVE, chosen))
        await serving.begin(profiles.valid[chosen], parent=None, adopt_run=keep[0] if keep else None)
    else:  # what to do next (resume, restore) is the switcher's: see restart_recovery.after_restart
        recorder.settle(HostAfter(HostState.IDLE))
    log.info(
        "reconciled: active units %s, adopted %s, parked %s",
        active or "none",
        chosen or "none",
        ", ".join(sorted(parked)) or "none",
    )
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


async def _stop_variants(profiles: ProfileSet, systemd: SystemdPort, within_s: float) -> list[str]:
    """Stop every sweep variant unit that runs: the sweep that started it died with the daemon."""
    owned = {lp.profile.unit for lp in profiles.valid.values()}
    stopped = []
    for unit in await systemd.running(VARIANT_UNITS):
        if unit in owned:
            continue
        try:
            outcome = await systemd.stop(unit, within_s=within_s)
        except K25Error as e:
            log.error("%s: a sweep's variant left running, not stopped: %s", unit, e)
            continue
        log.warning(
            "stopped %s (job %s, %s): a sweep's variant left running when the daemon stopped "
            "during the sweep",
            unit,
            outcome.job_result,
            outcome.state.active_state,
        )
        stopped.append(unit)
    return stopped


async def _experiment_cut(
    store: Store, profiles: ProfileSet, last: CutShort | None, serving: str | None, variants: list[str]
) -> CutShort | None:
    """An experiment (or sweep) that the restart cut short and that was to restore: its undo, a rollback
    to what it was to restore whose parent is the experiment. None: no such experiment, or what it was to
    restore serves already."""
    open_runs = await asyncio.to_thread(store.open_runs, kind=RunKind.EXPERIMENT)
    left = await asyncio.to_thread(store.interrupted_experiment, [r.id for r in open_runs if r.id])
    if left is None or left.restore_to is None or left.restore_to == serving:
        return None
    # What serves (or was being started): the experiment's profile, or a sweep's variant (no profile now).
    at = serving or (last.profile if last is not None else None)
    if at is None and variants:
        at = left.variants.get(variants[0], variants[0])
    log.warning(
        "run %d: an experiment cut short by the restart (at %s): restoring %s",
        left.run_id,
        at or "nothing",
        left.restore_to,
    )
    return CutShort(
        left.run_id, RunKind.EXPERIMENT, at or left.restore_to, left.restore_to, Phase.INTERRUPTED
    )
