"""Page-cache warming, measured on real files: a model folder of a few GiB, read by the fake engine's lazy
mmap loader (every page of every shard through a mapping) three ways in one run: cold (the files evicted
first with posix_fadvise(DONTNEED), on these files only), hot (already cached), and cold then warmed by
k25-ctl's Warmer. Also the warm's throughput against a plain sequential read of the same (evicted) files,
and the residency scan's time against the time it takes to read the folder.
Targets: warmed load <= 1.1x the hot load; warming >= 80% of sequential read throughput; the scan < 1% of
the read. `python perf/warm.py [--gib 2] [--dir PATH]`"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.core.profiles import Profile
from daemon.host.pagecache import PageCache, evict, mem_available
from daemon.warming.warmer import Warmer
from k25_sandbox.fake_engine import _read_weights

MIB = 2**20


def make(folder: Path, gib: float, shard_mib: int) -> list[Path]:
    files = []
    for i in range(max(1, int(gib * 1024 // shard_mib))):
        f = folder / f"model-{i:05d}.safetensors"
        with f.open("wb") as out:
            for _ in range(shard_mib // 16):
                out.write(os.urandom(16 * MIB))
        files.append(f)
    return files


def cold(files: list[Path]) -> None:
    for f in files:
        evict(f)


def load(folder: Path) -> float:
    began = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):
        _read_weights(folder, "")
    return time.monotonic() - began


def sequential(files: list[Path]) -> float:
    """One reader, 1 MiB reads, file after file: seconds."""
    began = time.monotonic()
    buf = bytearray(MIB)
    for f in files:
        with f.open("rb", buffering=0) as src:
            while src.readinto(buf):
                pass
    return time.monotonic() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--shard-mib", type=int, default=256)
    ap.add_argument("--dir", type=Path, help="where to write the model folder (default: a temp dir on disk)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="k25-warm-") as tmp:
        folder = Path(tmp)
        files = make(folder, args.gib, args.shard_mib)
        total = sum(f.stat().st_size for f in files)
        profile = Profile.model_validate({"name": "w", "engine": "vllm", "model": str(folder), "port": 9,
                                          "gpus": [0], "tensor_parallel_size": 1})  # fmt: skip
        warmer = Warmer(PageCache(), mem_available=mem_available, reserve=1 << 30, workers=4, block=16 * MIB)
        print(f"{len(files)} shards, {total / 2**30:.2f} GiB, MemAvailable {mem_available() / 2**30:.1f} GiB")

        cold(files)
        t_seq = sequential(files)
        print(f"plain sequential read (cold, 1 reader): {t_seq:.2f} s, {total / MIB / t_seq:.0f} MiB/s")

        cold(files)
        scan = warmer.scan(profile)
        print(f"residency scan: {scan.scan_s * 1000:.1f} ms ({scan.percent:.0f}% resident) = "
              f"{100 * scan.scan_s / t_seq:.3f}% of the read")  # fmt: skip

        async def warm() -> float:
            async def progress(done: int, total: int) -> None:
                return None

            r = await warmer.warm(profile, idle_io=False, progress=progress, stop=threading.Event())
            return r.seconds

        # Each way three times (the loader's own page walk is Python: medians, not one sample).
        colds, hots, warms, warmeds = [], [], [], []
        for _ in range(3):
            cold(files)
            colds.append(load(folder))
            cold(files)
            warms.append(asyncio.run(warm()))
            warmeds.append(load(folder))  # the first load after k25-ctl's warm
            hots.append(load(folder))  # the files already cached by a load before
        t_cold, t_hot = statistics.median(colds), statistics.median(hots)
        t_warm, t_warmed = statistics.median(warms), statistics.median(warmeds)
        print(f"load cold {t_cold:.2f} s, hot {t_hot:.2f} s, warmed {t_warmed:.2f} s: warmed/hot "
              f"{t_warmed / t_hot:.2f} (target <= 1.1), cold/hot {t_cold / t_hot:.1f}")  # fmt: skip
        print(f"warm: {t_warm:.2f} s, {total / MIB / t_warm:.0f} MiB/s = {100 * t_seq / t_warm:.0f}% of the "
              f"sequential read's throughput (target >= 80%)")  # fmt: skip
        print(f"cold load + warm first: {t_warm + t_warmed:.2f} s vs cold load {t_cold:.2f} s")


if __name__ == "__main__":
    main()
