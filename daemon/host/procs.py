"""Read-only view of processes (procfs + psutil): title, cmdline, uid, state (incl. D), wchan, cgroup, and
which files under the GPU device glob each one has open or mapped."""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

PROC = Path("/proc")
CGROUP_ROOTS = (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup"))


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    uid: int
    name: str  # comm
    title: str  # what ps shows: the (possibly setproctitle'd) command line
    cmdline: tuple[str, ...]
    state: str  # one letter, as in /proc/PID/stat: R S D Z T ...
    wchan: str
    cgroup: str  # the systemd (name=systemd or unified) cgroup path
    open_devices: tuple[str, ...]
    mapped_devices: tuple[str, ...]
    started: float = 0.0  # create time: tells a process from a later one with its PID
    shm_files: tuple[str, ...] = ()  # files under the shm glob it has open or mapped


class ProcessView(Protocol):
    def snapshot(self, device_glob: str, shm_glob: str | None = None) -> list[ProcInfo]: ...
    def cgroup_pids(self, control_group: str) -> list[int]: ...
    def alive(self, pid: int) -> bool: ...


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def systemd_cgroup(cgroup_file_text: str) -> str:
    """The cgroup path of the name=systemd (v1) or unified (v2) hierarchy from /proc/PID/cgroup."""
    unified = ""
    for line in cgroup_file_text.splitlines():
        hid, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "name=systemd":
            return path
        if hid == "0" and controllers == "":
            unified = path
    return unified


def mapped_matching(maps_text: str, pattern: str) -> tuple[str, ...]:
    found = []
    for line in maps_text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6:
            path = parts[5].removesuffix(" (deleted)")
            if fnmatch.fnmatchcase(path, pattern) and path not in found:
                found.append(path)
    return tuple(found)


def open_matching(pid: int, pattern: str) -> tuple[str, ...]:
    return open_matching_any(pid, (pattern,))[0]


def open_matching_any(pid: int, patterns: tuple[str, ...]) -> list[tuple[str, ...]]:
    """For each pattern, the files the process has open that match it (one pass over its fds)."""
    found: list[list[str]] = [[] for _ in patterns]
    fd_dir = PROC / str(pid) / "fd"
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return [() for _ in patterns]
    for fd in fds:
        with contextlib.suppress(OSError):
            target = str(fd.readlink()).removesuffix(" (deleted)")
            for i, pattern in enumerate(patterns):
                if fnmatch.fnmatchcase(target, pattern) and target not in found[i]:
                    found[i].append(target)
    return [tuple(f) for f in found]


class ProcfsProcesses:
    """The real view over /proc of the PID namespace the daemon runs in."""

    def snapshot(self, device_glob: str, shm_glob: str | None = None) -> list[ProcInfo]:
        out = []
        patterns = (device_glob, shm_glob) if shm_glob else (device_glob,)
        attrs = ["pid", "ppid", "uids", "name", "cmdline", "status", "create_time"]
        for p in psutil.process_iter(attrs):
            info = p.info
            pid = info["pid"]
            # setproctitle leaves the rest of the argv area blank: drop the empty tail.
            cmdline = tuple(a for a in (info["cmdline"] or ()) if a.strip())
            base = PROC / str(pid)
            state = _read(base / "stat").rpartition(")")[2].split()[:1]
            maps = _read(base / "maps")
            opened = open_matching_any(pid, patterns)
            shm_files = (
                tuple(dict.fromkeys((*opened[1], *mapped_matching(maps, shm_glob)))) if shm_glob else ()
            )
            out.append(
                ProcInfo(
                    pid=pid,
                    ppid=info["ppid"] or 0,
                    uid=info["uids"].real if info["uids"] else -1,
                    name=info["name"] or "",
                    title=" ".join(cmdline).strip() or f"[{info['name']}]",
                    cmdline=cmdline,
                    state=state[0] if state else "?",
                    wchan=_read(base / "wchan").strip(),
                    cgroup=systemd_cgroup(_read(base / "cgroup")),
                    open_devices=opened[0],
                    mapped_devices=mapped_matching(maps, device_glob),
                    started=info["create_time"] or 0.0,
                    shm_files=shm_files,
                )
            )
        return out

    def cgroup_pids(self, control_group: str) -> list[int]:
        """Every PID in the cgroup and below it (the kernel translates them into our PID namespace)."""
        rel = control_group.lstrip("/")
        for root in CGROUP_ROOTS:
            top = root / rel
            if rel and (top / "cgroup.procs").is_file():
                return sorted(set(_pids_below(top)))
        return []

    def alive(self, pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False


def _pids_below(top: Path) -> Iterable[int]:
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            for line in _read(Path(dirpath) / "cgroup.procs").split():
                if line.isdigit():
                    yield int(line)
