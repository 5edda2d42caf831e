"""The page cache, for weight files: how much of a file is resident (cachestat, or mincore over a read-only
mapping), and reading files into it (large sequential reads with readahead hints, at idle I/O priority when
asked). Nothing here evicts: `evict` exists for benchmarks and tests on their own files only."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import mmap
import os
import platform
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

PAGE = mmap.PAGESIZE
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "*.pth", "*.json", "*.model", "*.tiktoken")
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_POPULATE_READ = 22
MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(b & 1 for b in range(256))
# ioprio_set(2): no libc wrapper. IOPRIO_CLASS_IDLE = 3, shifted by IOPRIO_CLASS_SHIFT (13).
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}.get(platform.machine())
IOPRIO_IDLE = 3 << 13
IOPRIO_WHO_PROCESS = 1


@dataclass(frozen=True)
class FileResidency:
    path: str
    size: int
    resident: int  # bytes in the page cache


class PageCachePort(Protocol):
    def files(self, roots: Iterable[str]) -> list[Path]: ...
    def residency(self, path: Path) -> FileResidency: ...
    def read_into_cache(
        self, path: Path, *, block: int, idle_io: bool, progress: Callable[[int], None], stop: threading.Event
    ) -> int: ...


class _Range(ctypes.Structure):
    _fields_ = (("off", ctypes.c_uint64), ("len", ctypes.c_uint64))


class _Cachestat(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    )


_CACHESTAT = 451  # cachestat(2), Linux 6.5+ (the same number on x86_64 and aarch64)
_cachestat_works = True


def _cachestat(fd: int) -> int | None:
    """Cached pages of the whole file in one call (it counts folios, not pages: ~90x faster than mincore
    on 512 MiB); None where the kernel lacks it."""
    global _cachestat_works
    if not _cachestat_works:
        return None
    out = _Cachestat()
    if _libc.syscall(_CACHESTAT, fd, ctypes.byref(_Range(0, 0)), ctypes.byref(out), 0) != 0:
        _cachestat_works = False  # ENOSYS (older kernel) or EPERM (a seccomp filter): mincore from now on
        return None
    return int(out.nr_cache)


def resident_bytes(path: Path) -> FileResidency:
    """cachestat(2), or mincore(2) over a read-only shared mapping of the file: touches no page, reads no
    data."""
    size = path.stat().st_size
    if size == 0:
        return FileResidency(str(path), 0, 0)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if (pages := _cachestat(fd)) is not None:
            return FileResidency(str(path), size, min(size, pages * PAGE))
        with _mapping(fd, size, path) as addr:
            vec = ctypes.create_string_buffer((size + PAGE - 1) // PAGE)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            resident = vec.raw.translate(_LOW_BIT).count(1)  # bit 0: resident (in C, not a Python loop)
    finally:
        os.close(fd)
    return FileResidency(str(path), size, min(size, resident * PAGE))


@contextlib.contextmanager
def _mapping(fd: int, size: int, path: Path) -> Iterator[int]:
    """A read-only shared mapping of the whole file (libc's mmap: Python's gives no address)."""
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), f"mmap {path}")
    try:
        yield int(addr)
    finally:
        _libc.munmap(addr, size)


def idle_io_priority() -> bool:
    """This thread's I/O at idle priority (only when no one else wants the disk); False where unsupported."""
    if _IOPRIO_SET is None:
        return False
    return bool(_libc.syscall(_IOPRIO_SET, IOPRIO_WHO_PROCESS, threading.get_native_id(), IOPRIO_IDLE) == 0)


def read_file(
    path: Path, *, block: int, idle_io: bool, progress: Callable[[int], None], stop: threading.Event
) -> int:
    """Read the whole file sequentially in `block`-sized reads (the kernel keeps the pages); returns the
    bytes read. Readahead hints first: sequential, and the whole file wanted."""
    if idle_io:
        idle_io_priority()
    done = 0
    buf = bytearray(block)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        fd = f.fileno()
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        while not stop.is_set():
            n = f.readinto(view)
            if not n:
                break
            done += n
            progress(n)
    if not stop.is_set():
        _populate(path)
    return done


def _populate(path: Path) -> None:
    """Fault the cached pages into a mapping of ours once (MADV_POPULATE_READ, Linux 5.14+; no copy): a
    loader's first touch of its own mapping then costs what it does on a hot start (perf/warm.py: warmed
    load 1.1x the hot one after read() alone, ~1.0x with this)."""
    size = path.stat().st_size
    if size == 0:
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # No mapping, or EINVAL from an older kernel: the read alone stands.
        with contextlib.suppress(OSError), _mapping(fd, size, path) as addr:
            _libc.madvise(addr, size, MADV_POPULATE_READ)
    finally:
        os.close(fd)


def evict(path: Path) -> None:
    """Drop the file's clean pages (benchmarks and tests, on their own files)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def mem_available() -> int:
    """MemAvailable from /proc/meminfo, in bytes: what the page cache can grow into without swapping."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class PageCache:
    """The real page cache of this host."""

    def files(self, roots: Iterable[str]) -> list[Path]:
        """Weight and config files under each root (a folder, or one file), each once, sorted."""
        out: set[Path] = set()
        for root in roots:
            p = Path(root)
            if p.is_file():
                out.add(p)
            elif p.is_dir():
                for pattern in WEIGHT_PATTERNS:
                    out.update(f for f in p.rglob(pattern) if f.is_file())
        return sorted(out)

    def residency(self, path: Path) -> FileResidency:
        return resident_bytes(path)

    def read_into_cache(
        self, path: Path, *, block: int, idle_io: bool, progress: Callable[[int], None], stop: threading.Event
    ) -> int:
        return read_file(path, block=block, idle_io=idle_io, progress=progress, stop=stop)
