"""Read-only view of /dev/shm: each entry with its owner, and which live processes have it open or mapped."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from daemon.host.procs import holders_of


@dataclass(frozen=True)
class ShmEntry:
    name: str
    path: str
    size: int
    uid: int
    is_file: bool  # a regular file (never true for a symlink)
    is_symlink: bool
    users: tuple[int, ...]  # PIDs that have it open or mapped
    inode: int = 0
    device: int = 0


class ShmView(Protocol):
    @property
    def directory(self) -> Path: ...
    def entries(self, holders: Mapping[str, set[int]] | None = None) -> list[ShmEntry]: ...
    def users(self) -> dict[str, set[int]]: ...
    def remove(self, entry: ShmEntry, holders: Mapping[str, set[int]] | None = None) -> str | None: ...


class DevShm:
    def __init__(self, directory: Path) -> None:
        self._dir = directory

    @property
    def directory(self) -> Path:
        return self._dir

    def users(self) -> dict[str, set[int]]:
        """Path -> PIDs holding it (open fd or mapping), over every live process."""
        return holders_of(f"{self._dir}/*")

    def entries(self, holders: Mapping[str, set[int]] | None = None) -> list[ShmEntry]:
        """The folder's entries; `holders` (path -> PIDs) when the caller has already scanned processes."""
        held = self.users() if holders is None else holders
        out = []
        try:
            names = sorted(e.name for e in self._dir.iterdir())
        except OSError:
            return []
        for name in names:
            path = str(self._dir / name)
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone meanwhile
            out.append(
                ShmEntry(
                    name=name,
                    path=path,
                    size=st.st_size,
                    uid=st.st_uid,
                    is_file=stat.S_ISREG(st.st_mode),
                    is_symlink=stat.S_ISLNK(st.st_mode),
                    users=tuple(sorted(held.get(path, ()))),
                    inode=st.st_ino,
                    device=st.st_dev,
                )
            )
        return out

    def remove(self, entry: ShmEntry, holders: Mapping[str, set[int]] | None = None) -> str | None:
        """Unlink one planned file after checking again, right before, that it is the same regular file
        (never a symlink: nothing is followed) and that no live process holds it (`holders`: a scan made
        just now). Returns why it was kept, or None when removed."""
        dir_fd = os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            try:
                st = os.stat(entry.name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                return "already gone"
            if not stat.S_ISREG(st.st_mode):
                return "not a regular file"
            if (st.st_ino, st.st_dev) != (entry.inode, entry.device):
                return "replaced since the plan"
            if (self.users() if holders is None else holders).get(entry.path):
                return "in use by a live process"
            os.unlink(entry.name, dir_fd=dir_fd)
            return None
        finally:
            os.close(dir_fd)
