"""Ending a sandbox: every process of its PID and mount namespaces killed and awaited (pidfds, no polling),
those forked while it was killed included. The namespaces are held open (pinned) from before the kill to
the last check: a namespace's id is reused once it is gone, often by the next sandbox another test boots,
and an id read after that would name the other sandbox's processes."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from daemon.core.errors import HostTimeout

KINDS = ("pid", "mnt")
UNSHARE_EXIT_S = 10.0  # unshare reaps the sandbox's PID 1 and exits at once; this is for a stuck one


def namespace_pids(pid_ns: str, mnt_ns: str) -> list[int]:
    """The live processes in either namespace (ids as readlink shows them, "pid:[4026532600]"). A zombie
    is left out: it has exited and holds nothing; it waits only for its reaper."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                namespaces = {str((proc / f"ns/{kind}").readlink()) for kind in KINDS}
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


@contextlib.contextmanager
def pinned(init_pid: int, pid_ns: str, mnt_ns: str) -> Iterator[bool]:
    """The sandbox's namespaces held open while the block runs; False when its PID 1 is no longer the one
    it booted (then its namespaces may be gone and their ids another's: nothing may be done by them)."""
    fds: list[int] = []
    try:
        pidfd = os.pidfd_open(init_pid)
    except ProcessLookupError:
        yield False
        return
    try:
        with contextlib.suppress(OSError):
            fds = [os.open(f"/proc/{init_pid}/ns/{kind}", os.O_RDONLY) for kind in KINDS]
        alive = not select.select([pidfd], [], [], 0)[0]  # still running: the /proc entry opened was its
        ids = [str(Path(f"/proc/self/fd/{fd}").readlink()) for fd in fds]
        yield alive and ids == [pid_ns, mnt_ns]
    finally:
        for fd in (*fds, pidfd):
            os.close(fd)


def kill_all(unshare_pid: int, init_pid: int | None, namespaces: tuple[str, str] | None) -> None:
    """Every process of the sandbox killed and gone. Signals go through pidfds of processes found in its
    pinned namespaces, so neither a reused PID nor a reused namespace id is ever signalled. Without a known
    PID 1 (up() failed early), `unshare_pid`, this process's child, is all there is."""
    if init_pid is None or namespaces is None:
        _kill_and_wait([unshare_pid], 30)
    else:
        with pinned(init_pid, *namespaces) as ours:
            # `unshare` (in the mount namespace, outside the PID one) is not killed: it waits for the
            # sandbox's PID 1, reaps it, then exits. Killed with it, the PID 1 stayed a zombie until the
            # host's init reaped it, seconds after down() had returned (issue 49).
            unshare = _pidfd_in(unshare_pid, namespaces[1]) if ours else None
            deadline = time.monotonic() + 30
            while ours and (pids := [p for p in namespace_pids(*namespaces) if p != unshare_pid]):
                _kill_and_wait(pids, max(0.0, deadline - time.monotonic()))
            if unshare is not None:
                _await_exit(unshare, UNSHARE_EXIT_S)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(unshare_pid, 0)  # ours when this process booted it (tests): reaped, it has exited


def _pidfd_in(pid: int, mnt_ns: str) -> int | None:
    """A pidfd of `pid` if it is alive in the (pinned) mount namespace: never a reused PID's process."""
    fds = _pidfds([pid])
    if not fds:
        return None
    with contextlib.suppress(OSError):
        if str(Path(f"/proc/{pid}/ns/mnt").readlink()) == mnt_ns and not select.select(fds, [], [], 0)[0]:
            return fds[0]
    os.close(fds[0])
    return None


def _await_exit(pidfd: int, within_s: float) -> None:
    """Wait for the process to exit by itself; past `within_s` it is killed and awaited. Closes the fd."""
    try:
        if not select.select([pidfd], [], [], within_s)[0]:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            select.select([pidfd], [], [], 30)
    finally:
        os.close(pidfd)


def _kill_and_wait(pids: list[int], within_s: float) -> None:
    fds = _pidfds(pids)
    for fd in fds:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    _wait_all_exit(fds, within_s)


def describe(pid: int) -> str:
    """A leftover process as a report names it: its PID and command line."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        cmd = "gone"
    return f"process {pid} ({cmd.strip()[:120]})"
