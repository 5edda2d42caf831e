"""k25-ctl's own error types. Library errors are translated into these at one point each
(host/systemd.py for D-Bus, profiles.py for TOML/pydantic); the API maps them to HTTP in one handler."""

from __future__ import annotations


class K25Error(Exception):
    """Base of every error k25-ctl reports to a caller."""

    status_code = 500


class NotFound(K25Error):
    status_code = 404


class InvalidInput(K25Error):
    status_code = 422


class Busy(K25Error):
    status_code = 409


class WrongState(K25Error):
    """What is asked does not fit the state of what it names (a cancel of a run that is not running)."""

    status_code = 409


class Refused(K25Error):
    """The host state forbids the action (foreign GPU processes under policy `refuse`, needs_reset)."""

    status_code = 409


class UnitNotFound(NotFound):
    pass


class AccessDenied(K25Error):
    status_code = 403


class HostTimeout(K25Error):
    status_code = 504


class SystemdError(K25Error):
    """Any other D-Bus/systemd failure, with systemd's own message."""

    status_code = 502


class StoreError(K25Error):
    """The runs database failed (locked, disk full, corrupt)."""

    status_code = 503


class StoreUnwritable(StoreError):
    """The runs database cannot take a write now (disk full, read-only): records of what already happened
    are held in memory and written when it can (runs/held.py)."""
