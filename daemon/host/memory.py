"""The host RAM an engine's processes hold: the resident memory of its main process and every descendant
(its workers), read through psutil. A parked engine's pinned backup is resident, and so is the block a
woken vLLM keeps (torch's caching host allocator, vllm#16663)."""

from __future__ import annotations

from typing import Protocol

import psutil


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
