"""Transient systemd timers over D-Bus, as `systemd-run --on-calendar` / `--on-active` makes them: a timer
unit and the oneshot service it starts, both gone once stopped (or, for a one-shot timer, once it fired).
k25-ctl schedules experiments with these; it has no scheduler of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sdbus import SdBus
from sdbus.sd_bus_internals import SdBusBaseError

from daemon.core.errors import Refused, UnitNotFound
from daemon.host.systemd_dbus import (
    MANAGER_PATH,
    SYSTEMD,
    ManagerInterface,
    Property,
    TimerInterface,
    translate,
)


@dataclass(frozen=True)
class TimerSpec:
    name: str  # the timer unit, NAME.timer; its service is NAME.service
    description: str
    argv: list[str]  # what the service runs
    environment: dict[str, str]
    on_calendar: str | None = None  # an OnCalendar= expression
    on_active_s: float | None = None  # or this many seconds from now


USEC_INFINITY = 2**64 - 1  # systemd's "never", e.g. before a new timer's start job has run


def next_elapse(raw_us: int) -> int:
    """A timer's NextElapseUSecRealtime as TimerState keeps it: 0 for none. systemd reports USEC_INFINITY
    until the timer's start job has computed it (a query right after StartTransientUnit, on a busy host)."""
    return raw_us if 0 < raw_us < USEC_INFINITY else 0


@dataclass(frozen=True)
class TimerState:
    unit: str
    active_state: str
    next_elapse_us: int  # CLOCK_REALTIME µs of the next run; 0: none (it fired, or never will)


class TimerPort(Protocol):
    async def create(self, spec: TimerSpec) -> None: ...
    async def timers(self, pattern: str) -> list[TimerState]: ...
    async def remove(self, unit: str) -> None: ...


class SdbusTimers:
    def __init__(self, bus: SdBus) -> None:
        self.bus = bus
        self._manager = ManagerInterface.new_proxy(SYSTEMD, MANAGER_PATH, bus)

    async def create(self, spec: TimerSpec) -> None:
        timer: list[Property] = [
            ("Description", ("s", spec.description)),
            ("RemainAfterElapse", ("b", False)),
        ]
        if spec.on_calendar is not None:
            timer.append(("TimersCalendar", ("a(ss)", [("OnCalendar", spec.on_calendar)])))
        if spec.on_active_s is not None:
            usec = round(spec.on_active_s * 1e6)
            timer.append(("TimersMonotonic", ("a(st)", [("OnActiveSec", usec)])))
        service: list[Property] = [
            ("Description", ("s", spec.description)),
            ("Type", ("s", "oneshot")),
            ("ExecStart", ("a(sasb)", [(spec.argv[0], spec.argv, False)])),
            ("Environment", ("as", [f"{k}={v}" for k, v in spec.environment.items()])),
        ]
        try:
            await self._manager.start_transient_unit(
                f"{spec.name}.timer", "fail", timer, [(f"{spec.name}.service", service)]
            )
        except SdBusBaseError as e:
            raise translate(e, f"{spec.name}.timer") from e

    async def timers(self, pattern: str) -> list[TimerState]:
        try:
            rows = await self._manager.list_units_by_patterns([], [pattern])
            out = []
            for row in rows:
                proxy = TimerInterface.new_proxy(SYSTEMD, row[6], self.bus)
                out.append(TimerState(row[0], row[3], next_elapse(int(await proxy.next_elapse_realtime))))
            return out
        except SdBusBaseError as e:
            raise translate(e, pattern) from e

    async def remove(self, unit: str) -> None:
        try:
            await self._manager.stop_unit(unit, "replace")
        except SdBusBaseError as e:
            raise translate(e, unit) from e


class NoTimers:
    """Where no systemd is reachable (tests of other things): scheduling is refused, listing is empty."""

    async def create(self, spec: TimerSpec) -> None:
        raise Refused("scheduling needs systemd's timers, which this daemon cannot reach")

    async def timers(self, pattern: str) -> list[TimerState]:
        return []

    async def remove(self, unit: str) -> None:
        raise UnitNotFound(f"unit {unit} not found: no systemd timers here")
