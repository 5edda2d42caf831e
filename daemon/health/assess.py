"""A GPU's health state from what the driver said (pure). Two kinds of reason:

- marks, left by an event (an Xid, a lost GPU, a holder stuck in D state): they stay until a verified
  reset or an operator's acknowledgement clears them, across daemon restarts;
- live conditions, read from the GPU now (a slowdown, a PCIe width below its maximum, a pending row remap,
  corrected ECC errors rising): they last as long as the reading shows them.

The state is the worst of both: healthy < degraded (a warning; engines still start) < needs_reset (no
engine starts on the GPU)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from daemon.health.xid import Action, Xid, lookup
from daemon.host.gpu_health import DriverEvent, HealthReading

ECC_RISING_WINDOW_S = 3600.0  # corrected errors that grew within the hour keep the GPU degraded
DUPLICATE_WITHIN_S = 5.0  # the same Xid of the same GPU from NVML and from the kernel log is one event


class Health(enum.StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    NEEDS_RESET = "needs_reset"

    @property
    def rank(self) -> int:
        return {"healthy": 0, "degraded": 1, "needs_reset": 2}[self.value]


@dataclass(frozen=True)
class Mark:
    """A reason an event left on a GPU."""

    state: Health
    reason: str
    at: float  # epoch seconds
    xid: int | None = None


def mark_for(event: DriverEvent) -> Mark | None:
    """What an event leaves on its GPU: None for what changes nothing (application Xids, IGNORE rows,
    corrected ECC events, which the readings' rate covers). A GPU NVML lost and a holder stuck in D state
    (k25-ctl's own events) need a reset."""
    if event.kind == "lost":
        return Mark(Health.NEEDS_RESET, "GPU lost (NVML); NVIDIA's action: reboot the machine", event.at)
    if event.kind == "d_state":
        return Mark(Health.NEEDS_RESET, event.message, event.at)
    if event.kind == "ecc_single":
        return None
    if event.kind == "ecc_double":
        return Mark(
            Health.NEEDS_RESET, "double-bit ECC error (NVML event); NVIDIA's action: reset the GPU", event.at
        )
    row = lookup(event.code)
    state = xid_state(row)
    if state is Health.HEALTHY:
        return None
    return Mark(state, row.describe(), event.at, row.code)


def xid_state(row: Xid) -> Health:
    if row.application or row.action is Action.IGNORE:
        return Health.HEALTHY
    if row.needs_reset():
        return Health.NEEDS_RESET
    return Health.DEGRADED  # RESTART_APP, CONTACT_SUPPORT, a workflow that ends short of a reset


def live_reasons(
    reading: HealthReading, ecc_rise: tuple[int, float] | None, now: float
) -> list[tuple[Health, str]]:
    """What the reading shows now. `ecc_rise`: corrected errors' growth and when it was last seen."""
    if reading.lost:
        return [
            (Health.NEEDS_RESET, "NVML reports the GPU lost (fallen off the bus); NVIDIA's action: reboot")
        ]
    v = reading.values
    out: list[tuple[Health, str]] = []
    if v.get("remap_failure") is True:
        out.append((Health.NEEDS_RESET, "row remapping failed; NVIDIA's action: reset the GPU"))
    if v.get("remap_pending") is True:
        out.append((Health.DEGRADED, "a row remap is pending: it takes effect at the next GPU reset"))
    for reason in reading.slowdowns or ():
        out.append((Health.DEGRADED, f"clocks slowed: {reason.replace('_', ' ')}"))
    width, width_max = v.get("pcie_width"), v.get("pcie_width_max")
    if isinstance(width, int) and isinstance(width_max, int) and 0 < width < width_max:
        out.append((Health.DEGRADED, f"PCIe link x{width}, below its x{width_max}"))
    up, links = v.get("nvlink_up"), v.get("nvlink_links")
    if isinstance(up, int) and isinstance(links, int) and up < links:
        out.append((Health.DEGRADED, f"NVLink: {links - up} of {links} links down"))
    if ecc_rise is not None and now - ecc_rise[1] <= ECC_RISING_WINDOW_S:
        out.append((Health.DEGRADED, f"corrected ECC errors rising (+{ecc_rise[0]} within the hour)"))
    return out


def combine(marks: list[Mark], live: list[tuple[Health, str]]) -> tuple[Health, list[str]]:
    """The worst state, with every reason (worst first)."""
    reasons = sorted([(m.state, m.reason) for m in marks] + live, key=lambda r: -r[0].rank)
    state = reasons[0][0] if reasons else Health.HEALTHY
    return state, [r for _, r in reasons]


def duplicate(event: DriverEvent, recent: list[DriverEvent]) -> DriverEvent | None:
    """The recent event `event` repeats (same GPU, kind and code from the other source), if any."""
    for r in recent:
        if (
            r.source != event.source
            and r.gpu == event.gpu
            and r.kind == event.kind
            and r.code == event.code
            and abs(r.at - event.at) <= DUPLICATE_WITHIN_S
        ):
            return r
    return None
