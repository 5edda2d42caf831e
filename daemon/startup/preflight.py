"""What `k25-ctl serve` checks before it serves: settings, the token file, the profiles folder, the state
directory and its database, the port. A refusal is one journal line at priority err that says what is wrong
and what to do, and exit status 78 (EX_CONFIG), which the unit's RestartPreventExitStatus= keeps systemd
from restarting in a loop: a configuration does not fix itself."""

from __future__ import annotations

import errno
import logging
import os
import socket
import tomllib
from pathlib import Path

from pydantic import ValidationError

from daemon.api.auth import load_token
from daemon.core.errors import K25Error
from daemon.core.settings import Settings, load_settings

log = logging.getLogger("k25.start")
EXIT_CONFIG = 78  # sysexits.h EX_CONFIG; units/k25-ctl.service: RestartPreventExitStatus=78
AFTER = "then systemctl restart k25-ctl"


class ConfigRefused(K25Error):
    """The daemon will not start with this configuration (exit status EXIT_CONFIG)."""


def settings() -> Settings:
    where = os.environ.get("K25_CONFIG", "/etc/k25-ctl/k25-ctl.toml")
    try:
        return load_settings()
    except ValidationError as e:
        what = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'settings'}: {x['msg']}" for x in e.errors())
        raise ConfigRefused(f"settings in {where} are invalid: {what}: fix them, {AFTER}") from None
    except (tomllib.TOMLDecodeError, OSError, ValueError) as e:
        raise ConfigRefused(f"settings in {where} cannot be read: {e}: fix the file, {AFTER}") from None


def check(s: Settings) -> None:
    """Everything the daemon needs before its first request, each refusal in words an operator acts on."""
    try:
        load_token(s.token_path)
    except PermissionError as e:
        raise ConfigRefused(
            f"token file {s.token_path} cannot be read ({e.strerror}): chmod 600 it, owned by root, {AFTER}"
        ) from None
    except K25Error as e:
        raise ConfigRefused(f"{e}; {AFTER}") from None
    if not s.profiles_path.is_dir():
        raise ConfigRefused(
            f"profiles folder {s.profiles_path} does not exist: create it (install.sh does) "
            f"or set profiles_dir, {AFTER}"
        )
    _database(s.database_path)


def _database(db: Path) -> None:
    """The state directory and the runs database can be written (SQLite's WAL needs the directory too)."""
    state = db.parent
    try:
        state.mkdir(parents=True, exist_ok=True)
        probe = state / f".k25-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
        # Opened for writing, never created here (an empty file would read as a damaged database) and not
        # read by SQLite: a damaged one is the store's to move aside, not a reason to refuse.
        if db.exists():
            with db.open("r+b"):
                pass
    except OSError as e:
        why = e.strerror or str(e)
        raise ConfigRefused(
            f"the runs database {db} cannot be opened for writing ({why}): the state "
            f"directory {state} and the database must be writable (a read-only mount? another"
            f" owner? a full disk?), {AFTER}"
        ) from None


def bind(s: Settings) -> socket.socket:
    """The listening socket, bound before the app starts (READY=1 then means connections are accepted)."""
    if s.unix_socket is not None:
        s.unix_socket.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        where = str(s.unix_socket)
    else:
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP (without it,
        # back-to-back requests on one connection wait ~40 ms on Nagle + delayed ACK).
        family = socket.AF_INET6 if ":" in s.bind_host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        where = f"{s.bind_host}:{s.port}"
    try:
        sock.bind(str(s.unix_socket) if s.unix_socket is not None else (s.bind_host, s.port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigRefused(
                f"{where} is in use (another k25-ctl? `ss -ltnp 'sport = :{s.port}'` "
                f"names it): stop it or set port, {AFTER}"
            ) from None
        raise ConfigRefused(f"cannot listen on {where}: {e.strerror}: set bind_host/port, {AFTER}") from None
    sock.listen(128)
    return sock
