"""After a daemon restart: finish the switch it cut short (reconcile.py says what was cut)."""

from __future__ import annotations

import logging

from daemon.core.hoststate import HostState
from daemon.core.run_types import CutShort, Phase, RunKind
from daemon.runs.recorder import HostAfter
from daemon.switching.transaction import Switcher

log = logging.getLogger("k25.switch")


async def after_restart(switcher: Switcher, cut: CutShort | None, *, resume: bool) -> None:
    """Finish what a daemon restart cut short: probe the engine it was starting (`resume`), or, with
    nothing running, bring the known-good profile back (the undo it could not finish)."""
    if cut is None:
        return
    profiles = await switcher.read_profiles()
    lp = profiles.get(cut.profile)
    if resume and lp is not None:
        woke = cut.phase is Phase.WAKING
        await switcher.resume(lp, profiles, parent=cut.run_id, from_profile=cut.from_profile, woke=woke)
        return
    target = await switcher.rollback_target(cut.profile, cut.from_profile, profiles)
    if target is None:
        what = f"run {cut.run_id} ({cut.kind} to {cut.profile}, in {cut.phase})"
        reason = f"the daemon stopped during {what} and no known-good profile is left: activate one"
        switcher.recorder.settle(HostAfter(HostState.DEGRADED, None, reason))
        return
    log.warning(
        "run %d was cut short in %s with nothing running: restoring %s",
        cut.run_id,
        cut.phase,
        target.profile.name,
    )
    await switcher.activate(
        target.profile.name,
        force=True,
        kind=RunKind.ROLLBACK,
        parent=cut.run_id,
        from_profile=cut.profile,
    )
