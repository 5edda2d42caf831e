"""Measures this host's park rates with torch, as an engine's processes meet them. Run with the engine's own
interpreter (k25-ctl itself never imports torch): `python calibrate_torch.py --gib G --processes N
[--repeats R] [--file PATH]`. Prints one JSON object (GiB/s): pinning by one process and by N at once, with
torch's default pinned allocator and with registered pages (`pinned_use_cuda_host_register`); a GPU's
copies to and from pinned memory; a weight file from the page cache and from a cold disk into the GPU. Each
rate is measured R times: the median, and under "ranges" the lowest and highest (one process's default
pinning read 1.08, 1.83 and 1.60 GiB/s minutes apart on one H100 host). A standalone script: nothing of
k25-ctl is imported here."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GIB = 1024**3
REGISTERED = "pinned_use_cuda_host_register:True,pinned_num_register_threads:{threads}"


def _pin_child(gib: float) -> None:
    """One process's pin of `gib`, timed from the parent's go (its CUDA context made before)."""
    import torch

    torch.zeros(1, device="cuda")
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    began = time.perf_counter()
    held = torch.empty(int(gib * GIB), dtype=torch.uint8, pin_memory=True)
    sys.stdout.write(f"{time.perf_counter() - began} {held.numel()}\n")
    sys.stdout.flush()


def pin_rate(gib: float, processes: int, conf: str | None) -> float:
    """The aggregate rate of `processes` pinning `gib` between them at once (each a fresh process: torch
    reads its allocator settings once)."""
    env = dict(os.environ)
    env.pop("PYTORCH_ALLOC_CONF", None)
    if conf is None:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    else:
        env["PYTORCH_CUDA_ALLOC_CONF"] = conf
    argv = [sys.executable, __file__, "--pin-child", str(gib / processes)]
    kids = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)  # noqa: S603 - this script, this interpreter
        for _ in range(processes)
    ]
    try:
        pipes = [(k.stdin, k.stdout) for k in kids if k.stdin is not None and k.stdout is not None]
        if any(out.readline().strip() != "ready" for _, out in pipes):
            raise RuntimeError("a pinning process did not start")
        began = time.perf_counter()
        for into, _ in pipes:
            into.write("go\n")
            into.flush()
        if not all(out.readline() for _, out in pipes):
            raise RuntimeError("a pinning process failed")
        return gib / (time.perf_counter() - began)
    finally:
        for k in kids:
            k.kill()
            k.wait()


def copy_rates(gib: float) -> tuple[float, float]:
    """A GPU's copy into pinned host memory and back (GiB/s)."""
    import torch

    n = int(gib * GIB)
    device = torch.ones(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host[: 2**20].copy_(device[: 2**20])  # the first copy's set-up, not timed
    torch.cuda.synchronize()
    began = time.perf_counter()
    host.copy_(device)
    torch.cuda.synchronize()
    out = gib / (time.perf_counter() - began)
    began = time.perf_counter()
    device.copy_(host)
    torch.cuda.synchronize()
    return out, gib / (time.perf_counter() - began)


def file_rates(gib: float, path: str) -> tuple[float, float]:
    """A weight file into the GPU: from the page cache (read once before), then cold (evicted first)."""
    import torch

    n, file = int(gib * GIB), Path(path)
    if not file.exists() or file.stat().st_size < n:
        block = os.urandom(64 * 2**20)
        with file.open("wb") as out:
            for _ in range(0, n, len(block)):
                out.write(block)
    with file.open("rb") as f:
        while f.read(64 * 2**20):
            pass

    def load() -> float:
        began = time.perf_counter()
        torch.from_file(path, shared=False, size=n, dtype=torch.uint8).to("cuda")
        torch.cuda.synchronize()
        return gib / (time.perf_counter() - began)

    hot = load()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return hot, load()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pin-child", type=float)
    p.add_argument("--gib", type=float, default=8.0)
    p.add_argument("--processes", type=int, default=8)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--file", default="/var/tmp/k25-calibrate.bin")  # noqa: S108 - on disk, not tmpfs: a cold read
    a = p.parse_args()
    if a.pin_child is not None:
        _pin_child(a.pin_child)
        return
    registered = REGISTERED.format(threads=a.threads)
    samples: dict[str, list[float]] = {}
    for _ in range(a.repeats):  # each round measures every rate once: a drift spreads over all of them
        d2h, h2d = copy_rates(a.gib)
        hot, cold = file_rates(a.gib, a.file)
        once = {
            "pin_process": pin_rate(a.gib, 1, None),
            "pin_host": pin_rate(a.gib, a.processes, None),
            "pin_process_registered": pin_rate(a.gib, 1, registered),
            "pin_host_registered": pin_rate(a.gib, a.processes, registered),
            "device_to_host": d2h,
            "host_to_device": h2d,
            "page_cache": hot,
            "disk": cold,
        }
        for key, rate in once.items():
            samples.setdefault(key, []).append(rate)
    out: dict[str, object] = {k: statistics.median(v) for k, v in samples.items()}
    out |= {"ranges": {k: [min(v), max(v)] for k, v in samples.items()}, "samples": samples}
    out |= {"gib": a.gib, "processes": a.processes, "threads": a.threads, "repeats": a.repeats}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
