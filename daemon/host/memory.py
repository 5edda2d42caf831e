"""The host RAM an engine's processes hold: the resident memory of its main process and every descendant
(its workers), read through psutil. A parked engine's pinned backup is resident, and so is the block a
woken vLLM keeps (torch's caching host allocator, vllm#16663)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import psutil

from daemon.core.errors import K25Error
from daemon.host.pagecache import mem_available

# What a memory cgroup holds that the kernel can drop (file pages on the LRU lists; tmpfs and shared
# memory are swap-backed, not here), as cgroup v2 and v1 name it in memory.stat.
FILE_PAGES = {"v2": ("active_file", "inactive_file"), "v1": ("total_active_file", "total_inactive_file")}
LIMIT = {"v2": ("memory.max", "memory.current"), "v1": ("memory.limit_in_bytes", "memory.usage_in_bytes")}


class ProcessMemory(Protocol):
    def tree_bytes(self, main_pid: int) -> int:
        """Resident bytes of `main_pid` and its descendants (0: it is gone). Blocking."""
        ...


class PsutilMemory:
    def tree_bytes(self, main_pid: int) -> int:
        try:
            root = psutil.Process(main_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for p in tree:
            try:
                total += int(p.memory_info().rss)
            except psutil.Error:  # ended between the listing and the read
                continue
        return total


class NoMemory:
    """Where no engine process can be read (tests with fake units)."""

    def tree_bytes(self, main_pid: int) -> int:
        return 0


class CgroupAvailable:
    """MemAvailable as a memory-limited cgroup sees it (a container, a slice with MemoryMax, the sandbox):
    its limit minus what it holds that the kernel cannot drop, and never more than the host's
    MemAvailable. With no limit set the host's figure stands. Blocking (a few small reads)."""

    def __init__(self, path: Path, host: Callable[[], int] = mem_available) -> None:
        self.path = path
        self.host = host
        self.version = "v2" if (path / "memory.max").exists() else "v1"
        if not (path / LIMIT[self.version][0]).exists():
            raise K25Error(
                f"memory_cgroup {path} is not a memory cgroup (no memory.max, no memory.limit_in_bytes)"
            )

    def __call__(self) -> int:
        limit_file, usage_file = LIMIT[self.version]
        limit = (self.path / limit_file).read_text().strip()
        host = self.host()
        if limit == "max" or int(limit) >= 2**62:  # v2 "max"; v1's "unlimited" is a page-rounded 2^63
            return host
        stat = dict(line.split() for line in (self.path / "memory.stat").read_text().splitlines())
        dropped = sum(int(stat.get(k, 0)) for k in FILE_PAGES[self.version])
        held = int((self.path / usage_file).read_text()) - dropped
        return max(0, min(host, int(limit) - held))


def available_of(cgroup: Path | None) -> Callable[[], int]:
    """The MemAvailable that park admission and warming read: the host's, or `cgroup`'s where set."""
    return mem_available if cgroup is None else CgroupAvailable(cgroup)
