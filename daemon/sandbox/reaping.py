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


def kill_all(unshare_pid: int, init_pid: int | None) -> None:
    """Every process of the sandbox whose systemd is `init_pid` (run by `unshare_pid`), killed and gone."""
    namespaces: tuple[str, str] | None = None
    if init_pid:
        ns = Path(f"/proc/{init_pid}/ns")
        with contextlib.suppress(OSError):
            namespaces = (str((ns / "pid").readlink()), str((ns / "mnt").readlink()))
    victims = [unshare_pid, *(namespace_pids(*namespaces) if namespaces else ())]
    fds = _pidfds(victims)  # opened before the kill, so no PID can be reused under us
    # Killing the namespace's PID 1 makes the kernel SIGKILL every process in it; unshare then exits.
    target = init_pid or unshare_pid
    with contextlib.suppress(ProcessLookupError):
        os.kill(target, signal.SIGKILL)
    _wait_all_exit(fds, 30)
    # A process forked between the listing and the kill was killed too, but may not have exited yet (a busy
    # machine): wait for those as well, so that nothing of the sandbox outlives down().
    deadline = time.monotonic() + 30
    while namespaces and (late := _pidfds(namespace_pids(*namespaces))):
        _wait_all_exit(late, max(0.0, deadline - time.monotonic()))
    with contextlib.suppress(ChildProcessError):
        os.waitpid(unshare_pid, os.WNOHANG)
