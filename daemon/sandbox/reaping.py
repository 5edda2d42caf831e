"""Ending a sandbox: every process of its PID and mount namespaces killed and awaited (pidfds, no polling),
those forked while it was killed included."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from pathlib import Path

from daemon.core.errors import HostTimeout


def namespace_pids(pid_ns: str, mnt_ns: str) -> list[int]:
    """The live processes in either namespace. A zombie is left out: it has exited and holds nothing; it
    waits only for its reaper (the host's init, once the namespace's own is gone)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                namespaces = {str((proc / "ns/pid").readlink()), str((proc / "ns/mnt").readlink())}
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if {pid_ns, mnt_ns} & namespaces and state != "Z":
                    pids.append(int(proc.name))
    return pids


def _pidfds(pids: list[int]) -> list[int]:
    fds = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            fds.append(os.pidfd_open(pid))
    return fds


def _wait_all_exit(fds: list[int], within_s: float) -> None:
    """Wait (pidfds, no polling) until every process behind `fds` has exited; closes them."""
    deadline = time.monotonic() + within_s
    try:
        pending = set(fds)
        while pending:
            left = deadline - time.monotonic()
            readable, _, _ = select.select(list(pending), [], [], max(left, 0))
            if not readable:
                raise HostTimeout(f"{len(pending)} sandbox processes still alive after {within_s:.0f}s")
            pending -= set(readable)
    finally:
        for fd in fds:
            os.close(fd)


def kill_all(unshare_pid: int, namespaces: tuple[str, str] | None) -> None:
    """Every process of the sandbox (in its PID or mount namespace, as recorded when it booted) killed and
    gone, those forked meanwhile included. Signals go through pidfds opened on processes found in those
    namespaces, so a PID reused by another process is never signalled. `namespaces` None: up() failed
    before its systemd was known, and `unshare_pid` (this process's child) is all there is."""
    deadline = time.monotonic() + 30
    while pids := (namespace_pids(*namespaces) if namespaces else [unshare_pid]):
        fds = _pidfds(pids)
        for fd in fds:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        _wait_all_exit(fds, max(0.0, deadline - time.monotonic()))
        if namespaces is None:
            break
    with contextlib.suppress(ChildProcessError):
        os.waitpid(unshare_pid, os.WNOHANG)


def describe(pid: int) -> str:
    """A leftover process as a report names it: its PID and command line."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = "gone"
    return f"process {pid} ({cmd.strip()[:120]})"
