"""The fake engine's process tree: workers titled like the real ones that map the fake GPU device files
and hold engine-named shm files, and the faults that real engines show (orphans, leaks, SIGTERM ignored)."""

from __future__ import annotations

import contextlib
import mmap
import os
import secrets
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import setproctitle

CGROUP_MOUNTS = Path("/sys/fs/cgroup")
PARK_SIGNAL, WAKE_SIGNAL = signal.SIGUSR1, signal.SIGUSR2


def signal_workers(pids: list[int], sig: signal.Signals) -> None:
    """The engine's own workers (it forked them): park or wake their GPU memory."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@dataclass
class WorkerSpec:
    title: str
    devices: list[Path]
    shm_dir: Path
    shm_names: list[str]
    ignore_sigterm: bool = False
    leak_shm: bool = False
    orphan: bool = False
    files: list[Path] = field(default_factory=list)


def _map_devices(spec: WorkerSpec) -> list[mmap.mmap]:
    """Map every device file, as a CUDA context maps /dev/nvidiaN (the simulated GPU counts its memory)."""
    maps = []
    for dev in spec.devices:
        fd = os.open(dev, os.O_RDWR)
        maps.append(mmap.mmap(fd, 4096))
        os.close(fd)
    return maps


def _hold(spec: WorkerSpec) -> list[mmap.mmap]:
    """The shm files, created and mapped."""
    maps = []
    for name in spec.shm_names:
        path = spec.shm_dir / name
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 1 << 20)
        maps.append(mmap.mmap(fd, 1 << 20))
        os.close(fd)
        spec.files.append(path)
    return maps


def _cleanup(spec: WorkerSpec) -> None:
    if not spec.leak_shm:
        for path in spec.files:
            with contextlib.suppress(OSError):
                path.unlink()


def escape_unit_cgroup() -> None:
    """Move this process out of its systemd unit's cgroup (to the cgroup above system.slice), as a
    process started by hand would be: stopping the unit then no longer reaches it."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hid, controllers, path = line.split(":", 2)
        if "/system.slice" not in path:
            continue
        target = path.split("/system.slice")[0] or "/"
        mount = CGROUP_MOUNTS / ("unified" if hid == "0" else controllers.removeprefix("name="))
        if hid == "0" and not mount.is_dir():
            mount = CGROUP_MOUNTS
        with contextlib.suppress(OSError):
            (mount / target.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))


def _worker_main(spec: WorkerSpec, lifeline: int) -> None:
    setproctitle.setproctitle(spec.title)
    maps = _hold(spec)
    devices = _map_devices(spec)

    # Parking: SIGUSR1 gives the GPU memory back (the device mappings go), SIGUSR2 takes it again.
    def release(_sig: int, _frame: object) -> None:
        while devices:
            devices.pop().close()

    def resume(_sig: int, _frame: object) -> None:
        if not devices:
            devices.extend(_map_devices(spec))

    signal.signal(PARK_SIGNAL, release)
    signal.signal(WAKE_SIGNAL, resume)

    def on_term(_sig: int, _frame: object) -> None:
        _cleanup(spec)
        os._exit(0)

    signal.signal(signal.SIGTERM, signal.SIG_IGN if spec.ignore_sigterm else on_term)
    if spec.orphan:
        # An orphan outlives its parent and keeps the device mapped until someone kills it.
        while True:
            signal.pause()
    # A worker ends with its parent: the lifeline pipe reads EOF when the parent is gone.
    with contextlib.suppress(OSError):
        os.read(lifeline, 1)
    _cleanup(spec)
    del maps
    os._exit(0)


def spawn(spec: WorkerSpec) -> int:
    """Fork a worker; returns its PID (for an orphan, the PID of the detached grandchild's parent)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_end)
        try:
            if spec.orphan:
                os.setsid()
                if os.fork() != 0:
                    os._exit(0)
                escape_unit_cgroup()
            _worker_main(spec, read_end)
        finally:
            os._exit(1)
    os.close(read_end)
    # The write end stays open in the parent until it exits: that is the lifeline.
    os.set_inheritable(write_end, False)
    if spec.orphan:
        os.waitpid(pid, 0)
    return pid


def shm_token() -> str:
    return secrets.token_hex(4)


def stop_workers(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def log(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
