"""The daemon's idle footprint with production settings (watch every 10 s, GPU sampler every 10 s), baseline
active: the first minute after a start, then, after a minute's settle, a window of 5 minutes. For each: CPU
as % of one core, RSS, and what the daemon did with that CPU (py-spy samples, non-blocking, by the daemon's
own function they were in). Target: idle CPU <= 0.3% of a core. Needs root and py-spy (pip).
`python perf/footprint.py [--seconds 300] [--first 60] [--settle 60]`"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from k25_sandbox import sandbox as sbx
from perf.watch import cpu_s, daemon_process

PRODUCTION = {"watch_interval_s": "10", "stall_s": "120", "restart_backoff_s": "5"}
OWN = "/daemon/"  # frames of k25-ctl's own code
# Leaves where a thread waits (non-blocking sampling cannot tell py-spy which threads idle): not work.
IDLE = ("EpollSelector.select", "_worker", "wait", "Condition.wait", "_wait_for_tstate_lock", "sleep")


def record(pid: int, seconds: float, rate: int) -> tuple[subprocess.Popen[bytes], Path] | None:
    """py-spy samples of the daemon's running (not idle) threads for `seconds`, collapsed stacks."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return None
    out = tempfile.NamedTemporaryFile(prefix="k25-spy-", suffix=".txt", delete=False)
    argv = [spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", str(rate),
            "--nonblocking", "--format", "raw", "--output", out.name]  # fmt: skip
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), Path(out.name)


def what_it_did(spy: tuple[subprocess.Popen[bytes], Path] | None, top: int = 6) -> list[str]:
    """The samples by the innermost frame of the daemon's own code (or the library's, where none)."""
    if spy is None:
        return ["(py-spy not installed: pip install py-spy)"]
    proc, path = spy
    proc.wait(timeout=600)
    counts: collections.Counter[str] = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if frames[-1].split(" (")[0] in IDLE:
            continue
        own = [f for f in frames if OWN in f]
        counts[(own or frames)[-1].split(" (")[0]] += int(n)
    path.unlink()
    total = sum(counts.values())
    if not total:
        return ["no busy sample"]
    return [
        f"{100 * n / total:5.1f}% of {total} busy samples  {frame}" for frame, n in counts.most_common(top)
    ]


def window(p: psutil.Process, seconds: float, label: str, rate: int, *, from_start: bool = False) -> None:
    """CPU over `seconds`; `from_start`: counted from the process's start (its imports and start-up too)."""
    cpu0, t0 = (0.0, p.create_time()) if from_start else (cpu_s(p), time.time())
    ready = cpu_s(p) if from_start else 0.0
    spy = record(p.pid, t0 + seconds - time.time(), rate)
    time.sleep(max(0.0, t0 + seconds - time.time()))  # the measurement window
    wall = time.time() - t0
    cpu = 100 * (cpu_s(p) - cpu0) / wall
    before = f" ({ready:.2f}s of it before it said READY: imports, database, reconcile)" if from_start else ""
    print(
        f"{label} ({wall:.0f}s): CPU {cpu:.3f}% of a core{before}, RSS {p.memory_info().rss / 2**20:.1f} MiB; "
        "where the busy samples were:"
    )
    for line in what_it_did(spy):
        print(f"    {line}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--first", type=float, default=60.0, help="the window right after a start")
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    args = ap.parse_args()
    info = sbx.up(load_seconds=1.0, settings=PRODUCTION)
    try:
        auth = {"Authorization": f"Bearer {info.token}"}
        httpx.post(f"{info.url}/profiles/baseline/activate", params={"wait": True}, headers=auth, timeout=120)
        # A start with the baseline serving: reconcile, the first samples and scans, then the routine.
        subprocess.run(info.inside(["systemctl", "restart", "k25-ctl.service"]), check=True, timeout=120)
        p = daemon_process(info)
        window(p, args.first, "first minute after a start", args.rate, from_start=True)
        time.sleep(args.settle)  # the settle: a period, not a condition
        window(p, args.seconds, f"idle, after a {args.settle:.0f}s settle (target <= 0.3%)", args.rate)
    finally:
        sbx.down(info)


if __name__ == "__main__":
    main()
