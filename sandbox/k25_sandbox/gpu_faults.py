"""Faults of the sandbox's simulated GPUs, as the driver would show them (daemon/host/sim_health.py reads
them): an Xid through NVML's event path (the FIFO) or the kernel log (a `kernel` line in the sandbox's
journal, as journald takes /dev/kmsg), ECC and remapped-row counts, a lost GPU, a slowdown, a narrower
PCIe link, the driver's modes (doctor).

Also the sandbox's GPU reset command (`python gpu_faults.py reset --dir D [--gpus 0,3]`): it clears the
faults of the GPUs it resets, as a reset does, or fails while `<dir>/reset-fails` exists. Standard
library only: the daemon runs it as a script."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")  # as daemon/host/sim_health.py names them


def kernel_bus(gpu: int) -> str:
    """The PCI address as the driver prints it in an Xid line (PCI:0000:3a:00)."""
    return f"0000:{BUS_IDS[gpu % len(BUS_IDS)]}:00"


def _file(directory: Path, gpu: int) -> Path:
    return directory / f"gpu{gpu}.json"


def read_fault(directory: Path, gpu: int) -> dict[str, Any]:
    try:
        found: dict[str, Any] = json.loads(_file(directory, gpu).read_text())
    except (OSError, ValueError):
        found = {}
    return found


def set_fault(
    directory: Path,
    gpu: int,
    *,
    values: dict[str, Any] | None = None,
    slowdowns: list[str] | None = None,
    lost: bool | None = None,
) -> None:
    """Merge into GPU `gpu`'s fault file (written whole, then renamed: a reader never sees half)."""
    fault = read_fault(directory, gpu)
    if values:
        fault["values"] = fault.get("values", {}) | values
    if slowdowns is not None:
        fault["slowdowns"] = slowdowns
    if lost is not None:
        fault["lost"] = lost
    directory.mkdir(parents=True, exist_ok=True)
    tmp = _file(directory, gpu).with_suffix(".tmp")
    tmp.write_text(json.dumps(fault))
    tmp.rename(_file(directory, gpu))


def clear(directory: Path, gpus: list[int] | None = None) -> None:
    for f in directory.glob("gpu*.json"):
        if gpus is None or int(f.stem.removeprefix("gpu")) in gpus:
            f.unlink()


def xid_event(directory: Path, gpu: int, code: int, *, pid: int | None = None, kind: str = "xid") -> None:
    """NVML's event path: one line into the FIFO the daemon's event wait reads (it must be reading)."""
    line = json.dumps({"gpu": gpu, "code": code, "kind": kind, "pid": pid}) + "\n"
    fd = os.open(directory / "events", os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: no daemon reads it
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def xid_line(gpu: int, code: int, message: str, *, pid: int | None = None, name: str = "python3") -> str:
    """The driver's kernel-log line: `NVRM: Xid (PCI:0000:3a:00): 79, pid=1234, name=python3, ...`."""
    who = f"pid={pid}, name={name}, " if pid else "pid='<unknown>', name=<unknown>, "
    return f"NVRM: Xid (PCI:{kernel_bus(gpu)}): {code}, {who}{message}"


def kernel_argv(line: str) -> list[str]:
    """Logs `line` as the kernel does (SYSLOG_IDENTIFIER=kernel), run inside the sandbox."""
    return ["systemd-cat", "-t", "kernel", "-p", "err", "echo", line]


def set_modes(directory: Path, **over: Any) -> None:
    """The driver facts the doctor reads (driver, cuda, gpu_count, modes: persistence/ecc/mig)."""
    path = directory / "host.json"
    try:
        now = json.loads(path.read_text())
    except (OSError, ValueError):
        now = {}
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(now | over))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="gpu_faults.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    reset = sub.add_parser("reset", help="the sandbox's GPU reset: clears the GPUs' faults")
    reset.add_argument("--dir", type=Path, required=True)
    reset.add_argument("-i", "--gpus", default="", help="comma-separated indices (default: the board)")
    args = ap.parse_args(argv)
    if (args.dir / "reset-fails").exists():
        sys.stderr.write("GPU reset failed: the GPU is in use or the reset timed out\n")
        return 3
    gpus = [int(g) for g in args.gpus.split(",") if g] or None
    clear(args.dir, gpus)
    sys.stdout.write(f"GPU {'all' if gpus is None else ','.join(map(str, gpus))} reset successfully.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
