"""A sandbox's own cgroups: one below ours in each hierarchy, which its systemd takes as its root, and the
one of the memory controller (what the daemon reads host RAM from)."""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def _cgroup_mount(hid: str, controllers: str) -> Path | None:
    if hid == "0":
        unified = CGROUP_FS / "unified"
        return unified if unified.is_dir() else CGROUP_FS
    name = controllers.removeprefix("name=")
    for cand in (CGROUP_FS / name, CGROUP_FS / controllers):
        if cand.is_dir():
            return cand
    return None


def plan_cgroups(name: str) -> list[str]:
    """One cgroup per hierarchy, below ours: the sandbox's systemd takes it as its root, so two sandboxes
    (or the host) never share a unit cgroup."""
    dirs = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        mount = _cgroup_mount(hid, controllers)
        if mount is None or not os.access(mount, os.W_OK):
            continue
        d = mount / path.lstrip("/") / f"k25-{name}"
        if str(d) not in dirs:
            dirs.append(str(d))
    return dirs


def memory_dir(cgroups: list[str]) -> Path | None:
    """The sandbox's cgroup of the memory controller (v1: its own hierarchy; v2: the unified one, where
    the controller is enabled), or None."""
    for d in map(Path, cgroups):
        if d.is_relative_to(CGROUP_FS / "memory"):
            return d
        controllers = d.parent / "cgroup.controllers"
        if controllers.exists() and "memory" in controllers.read_text().split():
            return d
    return None
