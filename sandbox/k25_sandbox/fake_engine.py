"""A fake inference engine that speaks vLLM's or SGLang's real surface (docs/engines.md): the loading
log, no HTTP while loading, the flavor's /health, OpenAI streaming at a set token rate, real metric names,
processes titled like the real ones that map the fake GPU device files, engine-named shm files, and faults
on demand. `python -m k25_sandbox.fake_engine --flavor vllm|sglang --port P ...`"""

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import signal
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import setproctitle
import uvicorn

from daemon.engines import base, torch_alloc
from daemon.engines import sglang as sg
from daemon.engines import vllm as vl
from daemon.host.pagecache import resident_bytes
from k25_sandbox.fake_args import PARK_FAULTS, parse_args
from k25_sandbox.fake_http import build_app
from k25_sandbox.fake_park import ParkConfig
from k25_sandbox.fake_procs import (
    PARK_SIGNAL,
    WAKE_SIGNAL,
    WorkerSpec,
    log,
    shm_token,
    signal_workers,
    spawn,
    stop_workers,
)
from k25_sandbox.fake_stats import FakeConfig, parse_topics


def _gpus(args: argparse.Namespace) -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    gpus = [int(g) for g in visible.split(",") if g.strip().isdigit()] or [0]
    return gpus[: args.workers] if args.workers else gpus


def _pin_gbps(args: argparse.Namespace) -> float:
    """The aggregate rate a first park pins at: each worker at the per-process rate, up to the host's
    ceiling; registered pinning's rates where the environment turns it on (as torch reads it)."""
    registered = torch_alloc.registered(os.environ) and args.pin_gbps_registered > 0
    pair = (
        (args.pin_gbps_registered, args.pin_host_gbps_registered)
        if registered
        else (args.pin_gbps, args.pin_host_gbps)
    )
    one, ceiling = float(pair[0]), float(pair[1])
    total = one * len(_gpus(args))
    return min(total, ceiling) if ceiling > 0 else total


def _start_workers(args: argparse.Namespace) -> list[int]:
    faults = set(args.fault)
    common = {
        "shm_dir": args.shm_dir,
        "ignore_sigterm": "ignore-sigterm" in faults,
        "leak_shm": "leak-shm" in faults,
    }
    gpus = _gpus(args)
    dev = args.device_dir
    specs = []
    if args.flavor == "vllm":
        specs.append(
            WorkerSpec(vl.TITLE_ENGINE_CORE, [], shm_names=[vl.SHM_NAME.format(token=shm_token())], **common)
        )
        for rank, gpu in enumerate(gpus):
            specs.append(
                WorkerSpec(vl.TITLE_WORKER.format(rank=rank), [dev / f"nvidia{gpu}"], shm_names=[], **common)
            )
    else:
        for rank, gpu in enumerate(gpus):
            names = [sg.SHM_NAME.format(token=shm_token())] if rank == 0 else []
            specs.append(
                WorkerSpec(
                    sg.TITLE_SCHEDULER.format(rank=rank), [dev / f"nvidia{gpu}"], shm_names=names, **common
                )
            )
        specs.append(WorkerSpec(sg.TITLE_DETOKENIZER, [], shm_names=[], **common))
    pids = [spawn(s) for s in specs]
    if "orphan" in faults:
        title = (vl.TITLE_WORKER if args.flavor == "vllm" else sg.TITLE_SCHEDULER).format(rank=len(gpus))
        spawn(WorkerSpec(title, [dev / f"nvidia{gpus[-1]}"], shm_names=[], orphan=True, **common))
    return pids


def _read_weights(folder: Path, prefix: str) -> float:
    """A lazy mmap loader: map each shard and touch every page (cold pages come from disk, warm ones from
    the page cache). Logs the residency it found first; returns GiB read."""
    shards = sorted(folder.glob("*.safetensors"))
    found = [resident_bytes(f) for f in shards]
    size, resident = sum(f.size for f in found), sum(f.resident for f in found)
    log(
        prefix
        + f"weights resident at start: {100.0 * resident / max(size, 1):.1f}% of {size / 2**20:.0f} MiB"
    )
    for n, shard in enumerate(shards, 1):
        with shard.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            total = 0
            for off in range(0, len(m), mmap.PAGESIZE):
                total += m[off]
        _progress(prefix, n, len(shards))
    return size / 2**30


def _reread(folder: Path) -> None:
    """reload_weights after a level-2 wake: every shard read again, as fast as the page cache (or the disk,
    for what it evicted) gives it."""
    for shard in sorted(folder.glob("*.safetensors")):
        with shard.open("rb") as f:
            while f.read(8 * 2**20):
                pass


def _progress(prefix: str, n: int, total: int) -> None:
    line = base.LOAD_PROGRESS_LINE.format(
        pct=100.0 * n / total, n=n, total=total, elapsed="00:01", left="00:01", rate="1.00it/s"
    )
    log(prefix + line)


def _load(args: argparse.Namespace) -> float:
    """The loading phase: progress bar lines over --load-seconds (or while reading --weights); no HTTP is
    served meanwhile. Returns the GiB of weights (a wake brings as many back)."""
    prefix = vl.LOG_PREFIX.format(role="Worker_TP0", pid=os.getpid()) if args.flavor == "vllm" else ""
    if args.flavor == "sglang":
        log(sg.LINE_LOAD_BEGIN.format(mem=139.5))
    began, gib = time.monotonic(), 68.1234
    if args.weights is not None:
        gib = _read_weights(args.weights, prefix)
    else:
        for n in range(args.shards + 1):
            if n:
                time.sleep(args.load_seconds / args.shards)  # simulated disk read of one shard
            _progress(prefix, n, args.shards)
            if "crash-loading" in args.fault and n >= args.shards // 2:
                log(prefix + "ERROR 11-30 07:34:02 [core.py:700] EngineCore failed to start.")
                log("Traceback (most recent call last):")
                log('  File "/opt/engine/model_loader.py", line 412, in load_weights')
                log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
                raise SystemExit(1)
    secs = time.monotonic() - began
    if args.flavor == "vllm":
        log(prefix + vl.LINE_LOADED.format(gib=gib, secs=secs))
        log(
            vl.LOG_PREFIX.format(role="APIServer", pid=os.getpid())
            + vl.LINE_SERVER.format(host=args.host, port=args.port)
        )
    else:
        log(sg.LINE_LOAD_END.format(mem=70.2))
    return gib


def _park_config(args: argparse.Namespace, gib: float) -> ParkConfig | None:
    if not (args.sleep_mode if args.flavor == "vllm" else args.memory_saver):
        return None
    return ParkConfig(
        flavor=args.flavor,
        wake_s=gib * 2**30 / (args.wake_gbps * 1e9),
        reload_s=gib * 2**30 / (args.reload_gbps * 1e9),
        cpu_backup=args.cpu_backup,
        pin_s=gib * 2**30 / (rate * 1e9) if (rate := _pin_gbps(args)) > 0 else 0.0,
        pin_bytes=args.pin_mib * 2**20,
        reread=(lambda: _reread(args.weights)) if args.weights is not None else None,
        faults=PARK_FAULTS & set(args.fault),
        fault_after=args.fault_after,
    )


class _Workers:
    """Parking: the workers unmap their GPU device files (the simulated GPU frees their memory), and map
    them again on wake."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def release(self) -> None:
        signal_workers(self.pids, PARK_SIGNAL)

    def resume(self) -> None:
        signal_workers(self.pids, WAKE_SIGNAL)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Keep our own SIGTERM handling: stop the workers, or ignore it (the fault).
        yield


def _device_dir() -> Path:
    """Where the sandbox daemon's settings (K25_CONFIG, which the sandbox's units set) put the fake devices.
    The file is read as TOML: the settings model and pydantic-settings would cost each fake engine's start
    0.2 s of CPU, and a test run starts hundreds."""
    if config := os.environ.get("K25_CONFIG"):
        glob = tomllib.loads(Path(config).read_text()).get("gpu_device_glob")
        if isinstance(glob, str):
            return Path(glob).parent
    from daemon.core.settings import load_settings

    return Path(load_settings().gpu_device_glob).parent


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device_dir is None:  # launched by a sandbox unit
        args.device_dir = _device_dir()
    if args.flavor == "vllm":
        setproctitle.setproctitle(f"vllm serve {args.model}")
    else:
        setproctitle.setproctitle(f"python3 -m sglang.launch_server --model-path {args.model}")
    workers = _start_workers(args)
    if "ignore-sigterm" in args.fault:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:

        def on_term(_sig: int, _frame: object) -> None:
            stop_workers(workers)
            os._exit(0)

        signal.signal(signal.SIGTERM, on_term)
    try:
        gib = _load(args)
    except SystemExit:
        stop_workers(workers)
        raise
    cfg = FakeConfig(
        flavor=args.flavor,
        model=args.served_model_name,
        rate=args.rate,
        spec_tokens=args.spec_tokens,
        acceptance=args.acceptance,
        position_acceptance=tuple(float(x) for x in args.position_acceptance.split(",") if x),
        draft_cost=args.draft_cost,
        topic_acceptance=parse_topics(args.topic_acceptance),
        warmup_s=args.warmup_seconds if args.flavor == "sglang" else 0.0,
        deadlock="deadlock" in args.fault,
        crash_after=args.fault_after if "crash-after-ready" in args.fault else None,
        hang_after=args.fault_after if "hang-after-ready" in args.fault else None,
        max_running=args.max_running or None,
        batch_knee=args.batch_knee,
        draw_spread=args.draw_spread,
        park=_park_config(args, gib),
        answer_salt=args.answer_salt,
        logprob_noise=args.logprob_noise,
        adapters=tuple(a.split("=", 1)[0] for a in args.lora) if args.enable_lora else (),
    )
    app = build_app(cfg, time.monotonic(), lambda: log(sg.LINE_READY), _Workers(workers))
    server = _Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info", access_log=False))
    server.run()
    stop_workers(workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
