"""A sandbox's unit path: a minimal system's targets, D-Bus and journald, and the project's own units
rendered with the sandbox's k25-ctl, config and folders (its engines ahead of the machine's other work)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from daemon.core.command import k25_command
from daemon.core.errors import K25Error
from daemon.core.profile_files import under_private_tmp

REPO = Path(__file__).resolve().parents[2]  # the source tree, where the package runs from one
SYSTEM_UNITS = Path("/usr/lib/systemd/system")
COPIED_UNITS = (
    "dbus.socket",
    "dbus.service",
    "systemd-journald.service",
    "systemd-journald.socket",
    "systemd-journald-dev-log.socket",
)
TARGETS = (
    "sysinit",
    "basic",
    "shutdown",
    "sockets",
    "timers",
    "paths",
    "slices",
    "local-fs",
    "network",
    "network-online",
    "multi-user",
)
ENGINE_STOP_TIMEOUT_S = 3  # a SIGTERM-ignoring fake engine is SIGKILLed by systemd after this
SANDBOX_NICE = -10


def render_unit(text: str, config: Path, root: Path, binds: tuple[Path, ...] = ()) -> str:
    """A project unit with the sandbox's k25-ctl and config, and a short stop timeout for engines. The
    hardening stays; the sandbox's folder (config, database, fake devices) is bound into the daemon's view
    (it may lie under its private /tmp), as are `binds` and the checkout where it lies under /tmp; the host's
    /var/lib, /etc and /var/cache directories are not created (the sandbox keeps its files in its folder)."""
    text = text.replace("/usr/local/bin/k25-ctl", " ".join(k25_command()))
    text = text.replace("TimeoutStopSec=30", f"TimeoutStopSec={ENGINE_STOP_TIMEOUT_S}")
    text = re.sub(r"^(State|Configuration|Cache)Directory(Mode)?=.*\n", "", text, flags=re.M)
    env = f"Environment=K25_CONFIG={config}\nEnvironment=PYTHONUNBUFFERED=1\nWorkingDirectory={work_dir()}\n"
    # A GPU sets an engine's pace on a host, whatever else its CPUs do; here a fake engine's pace (and the
    # daemon's benchmark client timing it) is the CPU's. Ahead of the sandbox's neighbours (test workers,
    # installs, a browser), both keep their rates on a busy machine; they sleep most of the time, so the
    # neighbours lose little (CI: a sweep measured 64 tok/s for 85, a 1.8x speed-up read 1.6x).
    env += f"Nice={SANDBOX_NICE}\n"
    if "PrivateTmp=yes" in text or "ProtectSystem=strict" in text:  # the daemon's unit
        env += "".join(f"BindPaths={p}\n" for p in (root, *binds))  # visible and writable
        env += "".join(f"BindReadOnlyPaths={p}\n" for p in hidden_by_private_tmp())
    return text.replace("[Service]\n", "[Service]\n" + env, 1)


def units_dir() -> Path:
    """The project's unit files: the source tree's units/, or the copy an installed package carries under
    its prefix (as store.db finds the migrations)."""
    for folder in (REPO / "units", Path(sys.prefix) / "share/k25-ctl/units"):
        if any(folder.glob("k25-ctl.service")):
            return folder
    looked = f"{REPO / 'units'} and {Path(sys.prefix) / 'share/k25-ctl/units'}"
    raise K25Error(
        f"the unit files are missing from this installation (looked in {looked}): reinstall k25-ctl"
    )


def work_dir() -> Path:
    """Where the sandbox's units and commands run: the source tree (tests import from it), or / where the
    package is installed."""
    return REPO if (REPO / "daemon").is_dir() and (REPO / "pyproject.toml").is_file() else Path("/")


def hidden_by_private_tmp() -> list[Path]:
    """What the daemon's ExecStart needs that PrivateTmp would hide: the checkout, and the interpreter's
    prefixes (a virtualenv, and the Python it was made from) where they lie under /tmp or /var/tmp."""
    needed = [
        work_dir(),
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(sys.executable).resolve().parent.parent,
    ]
    found = [p for p in dict.fromkeys(needed) if under_private_tmp(str(p))]
    return [p for p in found if not any(p != q and p.is_relative_to(q) for q in found)]  # outermost only


def write_base_units(units: Path, wants: str = "") -> None:
    """The unit path of a minimal system: empty targets, D-Bus and journald (default.target wants them)."""
    units.mkdir()
    for t in TARGETS:
        (units / f"{t}.target").write_text(f"[Unit]\nDescription={t}\n")
    (units / "default.target").write_text(
        f"[Unit]\nDescription=k25 sandbox\nWants=dbus.socket systemd-journald.socket{wants}\n"
    )
    for name in COPIED_UNITS:
        shutil.copy(SYSTEM_UNITS / name, units / name)


def write_units(root: Path, config: Path, binds: tuple[Path, ...] = ()) -> None:
    units = root / "units"
    write_base_units(units, " k25-ctl.service")
    for unit in units_dir().glob("*.service"):
        (units / unit.name).write_text(render_unit(unit.read_text(), config, root, binds))
