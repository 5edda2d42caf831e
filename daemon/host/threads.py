"""Where one of this process's threads waits: the kernel's wait channel for it, from
/proc/self/task/TID/wchan ("0" while it runs or waits for a CPU; a kernel function's name while it sleeps:
futex_do_wait for a lock or the interpreter's GIL, do_epoll_wait, hrtimer_nanosleep, a socket's or a
disk's wait otherwise)."""

from __future__ import annotations

from pathlib import Path


def wait_channel(native_id: int) -> str:
    """The thread's wait channel ("" where it cannot be read)."""
    try:
        return Path(f"/proc/self/task/{native_id}/wchan").read_text()
    except OSError:
        return ""
