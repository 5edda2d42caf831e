"""A small file system of its own for a daemon's state, and filling it: what a full disk looks like to the
daemon (tests/system/test_disk_full.py, the simulation's disk_full step)."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "16m") mounted at the new folder `where` (0700), unmounted afterwards."""
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(path: Path) -> int:
    """Write `path` until the file system says it is full; the bytes written."""
    written = 0
    with path.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 2**20)
                f.flush()
                written += 2**20
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
    return written
