"""systemd over D-Bus (sdbus, async): start/stop/restart a unit and wait for its job through JobRemoved,
read a unit's state, and stream its state changes (PropertiesChanged)."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from sdbus import SdBus, sd_bus_open_system
from sdbus.sd_bus_internals import SdBusBaseError

from daemon.core.errors import HostTimeout, UnitNotFound
from daemon.host.systemd_dbus import (
    MANAGER_IFACE,
    MANAGER_PATH,
    PROPERTIES_IFACE,
    SYSTEMD,
    ManagerInterface,
    ServiceUnitProxy,
    translate,
)

Action = Literal["start", "stop"]


class ActiveState(enum.StrEnum):
    """A unit's ActiveState as systemd reports it (org.freedesktop.systemd1.Unit)."""

    ACTIVE = "active"
    RELOADING = "reloading"
    INACTIVE = "inactive"
    FAILED = "failed"
    ACTIVATING = "activating"
    DEACTIVATING = "deactivating"
    MAINTENANCE = "maintenance"
    REFRESHING = "refreshing"


# The states of a unit with processes, as far as systemd knows.
RUNNING = frozenset(
    {ActiveState.ACTIVE, ActiveState.ACTIVATING, ActiveState.DEACTIVATING, ActiveState.RELOADING}
)
DOWN = frozenset({ActiveState.INACTIVE, ActiveState.FAILED})


@dataclass(frozen=True)
class UnitState:
    unit: str
    load_state: str
    active_state: str
    sub_state: str
    result: str
    main_pid: int
    control_group: str
    exec_main_status: int
    exec_main_code: int
    exit_timestamp_us: int = 0  # CLOCK_REALTIME of the main process's exit, 0 if it has not exited
    limit_memlock: int | None = None  # LimitMEMLOCK (bytes; 2**64-1: infinity), None where not read

    @property
    def is_active(self) -> bool:
        return self.active_state == ActiveState.ACTIVE

    @property
    def is_down(self) -> bool:
        """Stopped or failed: nothing of the unit runs (or is about to)."""
        return self.active_state in DOWN

    @property
    def is_up(self) -> bool:
        """Active, or on its way there: an engine that serves or loads."""
        return self.active_state in (ActiveState.ACTIVE, ActiveState.ACTIVATING)


@dataclass(frozen=True)
class JobOutcome:
    unit: str
    action: Action
    job_result: str  # systemd's: done, failed, canceled, timeout, dependency, skipped
    state: UnitState
    seconds: float

    @property
    def ok(self) -> bool:
        return self.job_result == "done"

    @property
    def stop_escalated(self) -> bool:
        """The unit ignored SIGTERM for TimeoutStopSec and systemd had to SIGKILL it."""
        return self.action != "start" and self.state.result == "timeout"


class SystemdPort(Protocol):
    async def start(self, unit: str, *, within_s: float) -> JobOutcome: ...
    async def stop(self, unit: str, *, within_s: float) -> JobOutcome: ...
    async def state(self, unit: str) -> UnitState: ...
    async def reset_failed(self, unit: str) -> None: ...
    async def running(self, pattern: str) -> list[str]: ...
    def watch(self, unit: str) -> AbstractAsyncContextManager[AsyncIterator[UnitState]]: ...


def open_system_bus() -> SdBus:
    """One bus per process, opened by the app lifespan (or a tool's main)."""
    return sd_bus_open_system()


class SdbusSystemd:
    def __init__(self, bus: SdBus) -> None:
        self._bus = bus
        self._manager = ManagerInterface.new_proxy(SYSTEMD, MANAGER_PATH, bus)
        self._subscribed = False
        self._subscribe_lock = asyncio.Lock()

    async def _ensure_subscribed(self) -> None:
        # systemd only emits JobRemoved/PropertiesChanged to clients that called Subscribe(). Followers
        # start together: one call, under a lock (a second Subscribe() answers AlreadySubscribed).
        async with self._subscribe_lock:
            if self._subscribed:
                return
            try:
                await self._manager.subscribe()
            except SdBusBaseError as e:
                if "AlreadySubscribed" not in str(e.args[0] if e.args else e):
                    raise translate(e) from e
            self._subscribed = True

    @asynccontextmanager
    async def _signals(self, path: str, interface: str, member: str) -> AsyncIterator[asyncio.Queue[Any]]:
        """Register the match and return its queue BEFORE the caller acts, so no signal is missed."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        slot = await self._bus.match_signal_async(SYSTEMD, path, interface, member, queue.put_nowait)
        try:
            yield queue
        finally:
            slot.close()

    async def _job(self, action: Action, unit: str, within_s: float) -> JobOutcome:
        await self._ensure_subscribed()
        began = time.monotonic()
        async with self._signals(MANAGER_PATH, MANAGER_IFACE, "JobRemoved") as removed:
            try:
                job = await getattr(self._manager, f"{action}_unit")(unit, "replace")
            except SdBusBaseError as e:
                raise translate(e, unit) from e
            try:
                async with asyncio.timeout(within_s):
                    while True:
                        _id, path, _unit, result = (await removed.get()).get_contents()
                        if path == job:
                            break
            except TimeoutError:
                raise HostTimeout(
                    f"systemd {action} job for {unit} not done within {within_s:.0f}s"
                ) from None
        return JobOutcome(unit, action, result, await self.state(unit), time.monotonic() - began)

    async def start(self, unit: str, *, within_s: float) -> JobOutcome:
        return await self._job("start", unit, within_s)

    async def stop(self, unit: str, *, within_s: float) -> JobOutcome:
        return await self._job("stop", unit, within_s)

    async def _unit_path(self, unit: str) -> str:
        try:
            path: str = await self._manager.load_unit(unit)
        except SdBusBaseError as e:
            raise translate(e, unit) from e
        return path

    async def state(self, unit: str) -> UnitState:
        proxy = ServiceUnitProxy.new_proxy(SYSTEMD, await self._unit_path(unit), self._bus)
        try:
            props = await proxy.properties_get_all_dict(on_unknown_member="ignore")
        except SdBusBaseError as e:
            raise translate(e, unit) from e
        if props.get("load_state") == "not-found":
            raise UnitNotFound(f"unit {unit} not found")
        return UnitState(
            unit=unit,
            load_state=props.get("load_state", ""),
            active_state=props.get("active_state", ""),
            sub_state=props.get("sub_state", ""),
            result=props.get("result", ""),
            main_pid=int(props.get("main_pid", 0)),
            control_group=props.get("control_group", ""),
            exec_main_status=int(props.get("exec_main_status", 0)),
            exec_main_code=int(props.get("exec_main_code", 0)),
            exit_timestamp_us=int(props.get("exec_main_exit_timestamp", 0)),
            limit_memlock=int(props["limit_memlock"]) if "limit_memlock" in props else None,
        )

    async def reset_failed(self, unit: str) -> None:
        try:
            await self._manager.reset_failed_unit(unit)
        except SdBusBaseError as e:
            raise translate(e, unit) from e

    async def running(self, pattern: str) -> list[str]:
        """The units matching a glob that are up, starting or stopping (systemd's ListUnitsByPatterns)."""
        try:
            rows = await self._manager.list_units_by_patterns(sorted(s.value for s in RUNNING), [pattern])
        except SdBusBaseError as e:
            raise translate(e) from e
        return sorted(row[0] for row in rows)

    @asynccontextmanager
    async def watch(self, unit: str) -> AsyncIterator[AsyncIterator[UnitState]]:
        """The unit's current state, then each change, as systemd announces it."""
        await self._ensure_subscribed()
        path = await self._unit_path(unit)
        async with self._signals(path, PROPERTIES_IFACE, "PropertiesChanged") as changed:

            async def states() -> AsyncIterator[UnitState]:
                last = await self.state(unit)
                yield last
                while True:
                    await changed.get()
                    while not changed.empty():  # coalesce a burst into one read
                        changed.get_nowait()
                    now = await self.state(unit)
                    if now != last:
                        last = now
                        yield now

            yield states()
