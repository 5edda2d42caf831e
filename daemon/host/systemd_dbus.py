"""Typed sdbus interface classes for the few org.freedesktop.systemd1 members k25-ctl uses, and the one
place where D-Bus errors become k25-ctl errors."""

from __future__ import annotations

from typing import Any

from sdbus import (
    DbusInterfaceCommonAsync,
    dbus_method_async,
    dbus_property_async,
    dbus_signal_async,
)
from sdbus.dbus_exceptions import DbusFailedError
from sdbus.sd_bus_internals import SdBusBaseError

from daemon.core.errors import AccessDenied, HostTimeout, K25Error, SystemdError, UnitNotFound

SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER_IFACE = "org.freedesktop.systemd1.Manager"
PROPERTIES_IFACE = "org.freedesktop.DBus.Properties"


# A unit property as StartTransientUnit takes it: (name, (D-Bus signature, value)).
Property = tuple[str, tuple[str, Any]]
# ListUnitsByPatterns' row: name, description, load, active, sub, following, path, job id, job type, job path.
UnitRow = tuple[str, str, str, str, str, str, str, int, str, str]


class NoSuchUnitError(DbusFailedError):
    dbus_error_name = "org.freedesktop.systemd1.NoSuchUnit"


class LoadFailedError(DbusFailedError):
    dbus_error_name = "org.freedesktop.systemd1.LoadFailed"


class ManagerInterface(DbusInterfaceCommonAsync, interface_name=MANAGER_IFACE):
    @dbus_method_async("ss", "o")
    async def start_unit(self, name: str, mode: str) -> str:
        raise NotImplementedError

    @dbus_method_async("ss", "o")
    async def stop_unit(self, name: str, mode: str) -> str:
        raise NotImplementedError

    @dbus_method_async("s", "o")
    async def load_unit(self, name: str) -> str:
        raise NotImplementedError

    @dbus_method_async("ssa(sv)a(sa(sv))", "o")
    async def start_transient_unit(
        self, name: str, mode: str, properties: list[Property], aux: list[tuple[str, list[Property]]]
    ) -> str:
        raise NotImplementedError

    @dbus_method_async("asas", "a(ssssssouso)")
    async def list_units_by_patterns(self, states: list[str], patterns: list[str]) -> list[UnitRow]:
        raise NotImplementedError

    @dbus_method_async("s")
    async def reset_failed_unit(self, name: str) -> None:
        raise NotImplementedError

    @dbus_method_async()
    async def subscribe(self) -> None:
        raise NotImplementedError

    @dbus_signal_async("uoss")
    def job_removed(self) -> tuple[int, str, str, str]:
        raise NotImplementedError


class TimerInterface(DbusInterfaceCommonAsync, interface_name="org.freedesktop.systemd1.Timer"):
    @dbus_property_async("t", property_name="NextElapseUSecRealtime")
    def next_elapse_realtime(self) -> int:
        raise NotImplementedError

    @dbus_property_async("t", property_name="LastTriggerUSec")
    def last_trigger(self) -> int:
        raise NotImplementedError


class UnitInterface(DbusInterfaceCommonAsync, interface_name="org.freedesktop.systemd1.Unit"):
    @dbus_property_async("s", property_name="LoadState")
    def load_state(self) -> str:
        raise NotImplementedError

    @dbus_property_async("s", property_name="ActiveState")
    def active_state(self) -> str:
        raise NotImplementedError

    @dbus_property_async("s", property_name="SubState")
    def sub_state(self) -> str:
        raise NotImplementedError


class ServiceInterface(DbusInterfaceCommonAsync, interface_name="org.freedesktop.systemd1.Service"):
    @dbus_property_async("s", property_name="Result")
    def result(self) -> str:
        raise NotImplementedError

    @dbus_property_async("u", property_name="MainPID")
    def main_pid(self) -> int:
        raise NotImplementedError

    @dbus_property_async("s", property_name="ControlGroup")
    def control_group(self) -> str:
        raise NotImplementedError

    @dbus_property_async("i", property_name="ExecMainStatus")
    def exec_main_status(self) -> int:
        raise NotImplementedError

    @dbus_property_async("t", property_name="ExecMainExitTimestamp")
    def exec_main_exit_timestamp(self) -> int:
        raise NotImplementedError

    @dbus_property_async("i", property_name="ExecMainCode")
    def exec_main_code(self) -> int:
        raise NotImplementedError

    @dbus_property_async("t", property_name="LimitMEMLOCK")
    def limit_memlock(self) -> int:
        raise NotImplementedError


class ServiceUnitProxy(ServiceInterface, UnitInterface):
    """A service unit object: both interfaces, read with one GetAll each, the Unit's first (sdbus reads
    them in reverse MRO order). systemd sets a service's Result before its ActiveState goes failed or
    inactive, so ActiveState read first and Result after never pair a down state with the Result from
    before it. The other order tore: ActiveState "failed" beside "success, status 0" from a moment
    earlier, and an engine killed by SIGKILL read as stopped by hand (CI: test_prometheus)."""


def translate(err: SdBusBaseError, unit: str = "") -> K25Error:
    """The one point where sdbus errors become k25-ctl errors."""
    name = getattr(err, "dbus_error_name", "") or (str(err.args[0]) if err.args else "")
    text = str(err.args[-1]) if err.args else str(err)
    if isinstance(err, NoSuchUnitError | LoadFailedError) or name.endswith(("NoSuchUnit", "UnknownObject")):
        return UnitNotFound(f"unit {unit or '?'} not found: {text}")
    if name.endswith("AccessDenied") or "InteractiveAuthorizationRequired" in name:
        return AccessDenied(f"systemd refused access for {unit or 'the request'}: {text}")
    if name.endswith(("Timeout", "NoReply")):
        return HostTimeout(f"systemd did not answer for {unit or 'the request'}: {text}")
    return SystemdError(f"systemd error for {unit or 'the request'}: {name or type(err).__name__}: {text}")
