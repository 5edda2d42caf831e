"""One switch transaction's own state, carried from the request through the attempt and its rollback."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from daemon.core.profiles import LoadedProfile, ProfileSet
from daemon.store.models import utcnow


@dataclass
class SwitchState:
    """One transaction's own state: what it drains first, when the host left the balancer's rotation (to
    record the downtime on whichever run brings it back), and once it rolls back, a cancel is refused."""

    rolling_back: bool = False
    drain_from: LoadedProfile | None = None  # the serving profile, drained before it is stopped
    measure_cut: LoadedProfile | None = None  # not drained: still count what the stop cuts
    out_at: datetime | None = None  # the host was in rotation until then
    park_from: LoadedProfile | None = None  # the serving engine, parked instead of stopped where it may be
    resumed_wake: bool = False  # a daemon restart cut a wake short: the engine followed was woken
    stepping: str | None = None  # between the steps a cancel can end (the drain, the attempt): what it does
    profiles: ProfileSet = field(default_factory=ProfileSet)  # read once, when the switch was asked for

    def refusal(self, run_id: int) -> str | None:
        if self.rolling_back:
            return f"run {run_id} has failed and is rolling back: the rollback cannot be cancelled"
        if self.stepping:
            return f"run {run_id} is {self.stepping}: cancel again in a moment"
        return None

    def leave_rotation(self, serving: LoadedProfile | None, *, in_rotation: bool, drain: bool) -> None:
        """A host that serves (`serving`: active, its engine up) leaves the balancer's rotation now (unless
        a job already took it out); its engine drains first, or what its stop cuts is counted."""
        if serving is None:
            return  # nothing is served: nothing to drain, no downtime a balancer would see
        if in_rotation:
            self.out_at = utcnow()
        self.park_from = serving
        if drain and serving.profile.drain:
            self.drain_from = serving
        else:
            self.measure_cut = serving
