"""Teardown speed on a real GPU (run through the device tool): a CUDA process holding 40 GiB, three ways,
in one run:
  (a) bare kill: SIGKILL the holder, then read NVML until its memory is free;
  (b) k25-ctl: Teardown.run() from the request to GPUs verified clean (snapshot, plan, SIGTERM, verify);
  (c) the seed's shell sequence: kill -9, kill -9 $(fuser /dev/nvidia*), rm -f /dev/shm/*, with its two
      fixed `sleep 3`s. Re-enacted safely: its kills hit only our holder and its rm a private folder, since
      `kill $(fuser /dev/nvidia*)` would kill every GPU monitor and this benchmark itself.
Prints each time (median of --runs) and the ratios b/a and c/b. Targets: b <= 1.2 a, c >= 5 b."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.host.gpu import NvmlGpus  # noqa: E402
from daemon.host.procs import ProcfsProcesses  # noqa: E402
from daemon.host.shm import DevShm  # noqa: E402
from daemon.host.signals import PidfdControl  # noqa: E402
from daemon.teardown.execute import Teardown  # noqa: E402
from daemon.teardown.plan import TeardownPolicy  # noqa: E402

HOLDER = ROOT / "tests/gpu/holder.py"
SLACK_MIB = 1024


def start_holder(gpu: int, gib: float) -> subprocess.Popen[str]:
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu))
    p = subprocess.Popen(
        [sys.executable, str(HOLDER), "0", str(gib)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        raise SystemExit("the CUDA holder did not start")
    return p


def free(nvml: NvmlGpus, gpu: int, idle: int) -> bool:
    g = nvml.gpus()[gpu]
    return not g.processes and g.memory_used_mib <= idle + SLACK_MIB


def wait_free(nvml: NvmlGpus, gpu: int, idle: int) -> None:
    while not free(nvml, gpu, idle):
        pass  # a tight NVML read loop: the fastest any observer can see the memory back


def bare_kill(nvml: NvmlGpus, gpu: int, gib: float, idle: int) -> float:
    h = start_holder(gpu, gib)
    began = time.perf_counter()
    os.kill(h.pid, signal.SIGKILL)
    wait_free(nvml, gpu, idle)
    took = time.perf_counter() - began
    h.wait()
    return took


def k25(nvml: NvmlGpus, gpu: int, gib: float, shm: Path) -> tuple[float, dict[str, float]]:
    h = start_holder(gpu, gib)
    policy = TeardownPolicy("/dev/nvidia*", ("VLLM::*", "sglang::*"), ("psm_*",), ("nvidia-persistenced",))
    teardown = Teardown(ProcfsProcesses(), nvml, DevShm(shm), PidfdControl(), policy, term_grace_s=10,
                        kill_grace_s=10, verify_timeout_s=30, verify_samples=3, slack_mib=SLACK_MIB)  # fmt: skip
    plan = asyncio.run(teardown.plan((gpu,)))
    if {v.pid for v in plan.victims} != {h.pid}:
        h.kill()
        raise SystemExit(f"refusing to run: victims {[v.pid for v in plan.victims]} are not only our holder")
    began = time.perf_counter()
    report = asyncio.run(teardown.run((gpu,)))
    took = time.perf_counter() - began
    h.wait()
    if not report.ok:
        raise SystemExit(f"teardown failed: {report.error}")
    return took, report.steps


def seed_sequence(nvml: NvmlGpus, gpu: int, gib: float, idle: int, shm: Path) -> float:
    h = start_holder(gpu, gib)
    began = time.perf_counter()
    script = f"kill -9 {h.pid}; kill -9 {h.pid} 2>/dev/null; rm -f {shm}/*; sleep 3; sleep 3"
    subprocess.run(["bash", "-c", script], check=False)
    wait_free(nvml, gpu, idle)
    took = time.perf_counter() - began
    h.wait()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--gib", type=float, default=40.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    nvml = NvmlGpus()
    gpus = nvml.gpus()
    if not gpus:
        raise SystemExit("no GPU (NVML): run this on the device machine")
    idle = gpus[args.gpu].memory_used_mib
    print(
        f"GPU {args.gpu}: {gpus[args.gpu].name}, driver {nvml.driver_version()}, idle {idle} MiB, holder {args.gib} GiB"
    )
    with tempfile.TemporaryDirectory() as shm_dir:
        shm = Path(shm_dir)
        a = [bare_kill(nvml, args.gpu, args.gib, idle) for _ in range(args.runs)]
        b_runs = [k25(nvml, args.gpu, args.gib, shm) for _ in range(args.runs)]
        b = [t for t, _ in b_runs]
        c = [seed_sequence(nvml, args.gpu, args.gib, idle, shm)]
    ma, mb, mc = statistics.median(a), statistics.median(b), statistics.median(c)
    print(f"(a) bare SIGKILL -> NVML free      : {ma:.3f} s  runs {[round(x, 3) for x in a]}")
    print(f"(b) k25-ctl teardown -> verified   : {mb:.3f} s  runs {[round(x, 3) for x in b]}")
    print(
        f"    steps of the median run        : { {k: round(v, 4) for k, v in sorted(b_runs, key=lambda r: r[0])[len(b_runs) // 2][1].items()} }"
    )
    print(f"(c) seed shell sequence -> free    : {mc:.3f} s")
    print(f"ratio b/a = {mb / ma:.2f} (target <= 1.2)   ratio c/b = {mc / mb:.1f}x (target >= 5)")


if __name__ == "__main__":
    main()
