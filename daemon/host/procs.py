"""Read-only view of processes (procfs): title, cmdline, uid, state (incl. D), wchan, cgroup, and
which files under the GPU device glob each one has open or mapped."""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
    def snapshot(
        self, device_glob: str, shm_glob: str | None = None, *, with_fds: bool = True
    ) -> list[ProcInfo]: ...
    def cgroup_pids(self, control_group: str) -> list[int]: ...
    def listeners(self, ports: tuple[int, ...]) -> dict[int, list[int | None]]: ...
    def mapped(self, pattern: str) -> dict[str, set[int]]: ...
    def access_problem(self) -> str | None: ...


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


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def glob_prefix(pattern: str) -> bytes:
    """The literal start of a glob: a file without it in its text cannot match (a fast pre-filter)."""
    cut = min((i for i, c in enumerate(pattern) if c in "*?["), default=len(pattern))
    return pattern[:cut].encode()


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as f:  # noqa: PTH123 - the hot loop of a /proc scan: no Path objects
            return f.read()
    except OSError:
        return b""


def parse_stat(raw: bytes) -> tuple[str, str, int, float] | None:
    """(comm, state, ppid, start time in seconds since boot) from /proc/PID/stat."""
    left, right = raw.find(b"("), raw.rfind(b")")
    if left < 0 or right < 0:
        return None
    fields = raw[right + 2 :].split()
    if len(fields) < 20:
        return None
    comm = raw[left + 1 : right].decode(errors="replace")
    return comm, fields[0].decode(), int(fields[1]), int(fields[19]) / CLOCK_TICKS


def files_matching(
    pid: int, patterns: tuple[str, ...], prefixes: tuple[bytes, ...], *, with_fds: bool = True
) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """For each pattern: the files the process has open (if `with_fds`) and those it maps that match it.
    /proc/PID/maps is parsed only when one of the globs' literal prefixes occurs in it."""
    raw = _read_bytes(f"/proc/{pid}/maps")
    text = raw.decode(errors="replace") if any(pre in raw for pre in prefixes) else ""
    mapped = [
        mapped_matching(text, pat) if pre in raw else () for pat, pre in zip(patterns, prefixes, strict=True)
    ]
    nothing: list[tuple[str, ...]] = [() for _ in patterns]
    return (open_matching_any(pid, patterns) if with_fds else nothing), mapped


def holders_of(pattern: str) -> dict[str, set[int]]:
    """Path -> PIDs that have a file matching `pattern` open or mapped, over every live process."""
    held: dict[str, set[int]] = {}
    prefixes = (glob_prefix(pattern),)
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            pid = int(entry.name)
            opened, mapped = files_matching(pid, (pattern,), prefixes)
            for path in (*opened[0], *mapped[0]):
                held.setdefault(path, set()).add(pid)
    return held


def mapped_by_live(pattern: str) -> dict[str, set[int]]:
    """Path -> live (not zombie) PIDs that map a file matching `pattern`: the cheapest scan there is (one
    read of maps per process, stat only for the few that map one)."""
    held: dict[str, set[int]] = {}
    prefix = glob_prefix(pattern)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        raw = _read_bytes(f"/proc/{entry.name}/maps")
        if prefix not in raw:
            continue
        paths = mapped_matching(raw.decode(errors="replace"), pattern)
        parsed = parse_stat(_read_bytes(f"/proc/{entry.name}/stat")) if paths else None
        if parsed is not None and parsed[1] != "Z":
            for path in paths:
                held.setdefault(path, set()).add(int(entry.name))
    return held


def start_time(pid: int) -> float | None:
    parsed = parse_stat(_read_bytes(f"/proc/{pid}/stat"))
    return parsed[3] if parsed else None


class ProcfsProcesses:
    """The real view over /proc of the PID namespace the daemon runs in. One pass, few reads a process
    (stat, cmdline, cgroup, maps; fds only when asked), since teardown plans on it while the GPUs wait."""

    def snapshot(
        self, device_glob: str, shm_glob: str | None = None, *, with_fds: bool = True
    ) -> list[ProcInfo]:
        out = []
        patterns = (device_glob, shm_glob) if shm_glob else (device_glob,)
        prefixes = tuple(glob_prefix(p) for p in patterns)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            base = f"/proc/{pid}"
            parsed = parse_stat(_read_bytes(f"{base}/stat"))
            if parsed is None:
                continue  # gone meanwhile
            comm, state, ppid, started = parsed
            # setproctitle leaves the rest of the argv area blank: drop the empty tail.
            args = _read_bytes(f"{base}/cmdline").split(b"\0")
            cmdline = tuple(a.decode(errors="replace") for a in args if a.strip())
            opened, mapped = files_matching(pid, patterns, prefixes, with_fds=with_fds)
            try:
                uid = entry.stat().st_uid
            except OSError:
                continue
            out.append(
                ProcInfo(
                    pid=pid,
                    ppid=ppid,
                    uid=uid,
                    name=comm,
                    title=" ".join(cmdline).strip() or f"[{comm}]",
                    cmdline=cmdline,
                    state=state,
                    wchan=_read(PROC / str(pid) / "wchan").strip() if state == "D" else "",
                    cgroup=systemd_cgroup(_read_bytes(f"{base}/cgroup").decode(errors="replace")),
                    open_devices=opened[0],
                    mapped_devices=mapped[0],
                    started=started,
                    shm_files=tuple(dict.fromkeys((*opened[1], *mapped[1]))) if shm_glob else (),
                )
            )
        return out

    def mapped(self, pattern: str) -> dict[str, set[int]]:
        return mapped_by_live(pattern)

    def access_problem(self) -> str | None:
        """Why other processes' memory maps cannot be read, or None. PID 1 holds every capability, so a
        daemon whose capabilities are bounded (k25-ctl.service) reads its maps only with CAP_SYS_PTRACE;
        without it the scan above silently sees no mapping, and GPU holders go unnoticed."""
        try:
            with open("/proc/1/maps", "rb") as f:  # noqa: PTH123 - as the scan reads it
                f.read(1)
        except PermissionError as e:
            return (
                f"cannot read other processes' memory maps (/proc/1/maps: {e.strerror}): teardown cannot "
                "see which processes map the GPUs; the daemon needs CAP_SYS_PTRACE"
            )
        except OSError:
            return None
        return None

    def listeners(self, ports: tuple[int, ...]) -> dict[int, list[int | None]]:
        """Port -> PIDs listening on it over TCP (None: a socket whose process is outside our PID
        namespace). psutil maps the kernel's socket table to PIDs through /proc/PID/fd."""
        import psutil

        if not ports:
            return {}
        out: dict[int, list[int | None]] = {}
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port in ports:
                pids = out.setdefault(c.laddr.port, [])
                if c.pid not in pids:
                    pids.append(c.pid)
        return out

    def cgroup_pids(self, control_group: str) -> list[int]:
        """Every PID in the cgroup and below it (the kernel translates them into our PID namespace)."""
        rel = control_group.lstrip("/")
        for root in CGROUP_ROOTS:
            top = root / rel
            if rel and (top / "cgroup.procs").is_file():
                return sorted(set(_pids_below(top)))
        return []


def _pids_below(top: Path) -> Iterable[int]:
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            for line in _read(Path(dirpath) / "cgroup.procs").split():
                if line.isdigit():
                    yield int(line)
