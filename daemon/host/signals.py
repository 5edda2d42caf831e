"""Signals and exits of processes through pidfds: a pidfd names one process, never a later one that reuses
its PID, and becomes readable when that process exits, so waiting is an event, not a poll."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from daemon.host.procs import start_time


@dataclass
class ProcHandle:
    pid: int
    fd: int


class ProcessControl(Protocol):
    def open(self, pid: int, started: float) -> ProcHandle | None: ...
    def send(self, handle: ProcHandle, sig: signal.Signals) -> bool: ...
    async def wait_exits(self, handles: list[ProcHandle], within_s: float) -> set[int]: ...
    def exited(self, handle: ProcHandle) -> bool: ...
    def describe(self, pid: int) -> tuple[str, str]: ...
    def close(self, handle: ProcHandle) -> None: ...


class PidfdControl:
    def open(self, pid: int, started: float) -> ProcHandle | None:
        """A handle on the process the snapshot saw; None when it is gone or the PID was reused."""
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return None
        now = start_time(pid)
        if now is None or (started and now != started):
            os.close(fd)
            return None
        return ProcHandle(pid, fd)

    def send(self, handle: ProcHandle, sig: signal.Signals) -> bool:
        try:
            signal.pidfd_send_signal(handle.fd, sig)
        except ProcessLookupError:
            return False
        return True

    def exited(self, handle: ProcHandle) -> bool:
        import select

        readable, _, _ = select.select([handle.fd], [], [], 0)
        return bool(readable)

    async def wait_exits(self, handles: list[ProcHandle], within_s: float) -> set[int]:
        """Wait until every handle's process has exited or `within_s` passed; returns the exited PIDs."""
        loop = asyncio.get_running_loop()
        exited: set[int] = set()
        pending = [h for h in handles if not self.exited(h)]
        exited.update(h.pid for h in handles if h not in pending)
        if not pending:
            return exited
        done = asyncio.Event()

        def on_exit(h: ProcHandle) -> None:
            loop.remove_reader(h.fd)
            exited.add(h.pid)
            if all(p.pid in exited for p in pending):
                done.set()

        for h in pending:
            loop.add_reader(h.fd, on_exit, h)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within_s):
                    await done.wait()
        finally:
            for h in pending:
                if h.pid not in exited:
                    loop.remove_reader(h.fd)
        return exited

    def describe(self, pid: int) -> tuple[str, str]:
        """(state letter, wchan) of a process, e.g. ('D', 'uvm_...') for one stuck in the driver."""
        base = Path(f"/proc/{pid}")
        try:
            state = base.joinpath("stat").read_text().rpartition(")")[2].split()[0]
            wchan = base.joinpath("wchan").read_text().strip()
        except (OSError, IndexError):
            return ("gone", "")
        return (state, wchan)

    def close(self, handle: ProcHandle) -> None:
        with contextlib.suppress(OSError):
            os.close(handle.fd)
