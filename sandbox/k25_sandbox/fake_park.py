"""The fake engine's parking, with the real engines' semantics (docs/engines.md, "Parking: sleep, ..."):
- vLLM `/sleep?level=1` keeps a CPU copy of the weights; `level=2` discards them: a `/wake_up` brings the
  memory back but not its content until `POST /collective_rpc {"method": "reload_weights"}`; the wake can
  be split by `?tags=weights` / `?tags=kv_cache`.
- SGLang `/release_memory_occupation` releases the weights: `/resume_memory_occupation` restores them only
  with `--enable-weights-cpu-backup`.
A wake that does not restore the weights answers garbage with /health 200, as the real ones do. Each call
is logged as the engine logs it, so a test reads their order in the unit's journal."""

from __future__ import annotations

import asyncio
import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from daemon.engines import sglang as sg
from daemon.engines import vllm as vl
from k25_sandbox.fake_answer import Weights
from k25_sandbox.fake_procs import log

PARTS = ("weights", "kv_cache")


class ParkControl(Protocol):
    """The engine's workers: they give their GPU memory back, and take it again."""

    def release(self) -> None: ...
    def resume(self) -> None: ...


@dataclass
class ParkConfig:
    flavor: str
    wake_s: float = 0.0  # the weights back from host RAM (level 1, a CPU backup)
    reload_s: float = 0.0  # reload_weights: the weights read again from the checkpoint
    cpu_backup: bool = False  # SGLang's --enable-weights-cpu-backup
    # The backup's pinning, as on a real host (docs/parking.md): a first park pins for pin_s and holds
    # pin_bytes of real host RAM; the block stays in the process after the wake (torch keeps it), so a
    # later park is the copy alone. 0: no pinning physics.
    pin_s: float = 0.0
    pin_bytes: int = 0
    reread: Callable[[], None] | None = None  # reload_weights reads the weight files again (level 2)
    # sleep-keeps-memory, wake-fails, wake-corrupts, wake-zero-acceptance, no-collective-rpc, and the
    # fingerprint's: wake-drifts, wake-corrupts-shard, stale-prefix-cache, drifts-after-cycles,
    # wake-then-fails, wake-loses-lora
    faults: frozenset[str] = frozenset()
    fault_after: int = 3  # drifts-after-cycles: the wake from which on


@dataclass
class FakePark:
    cfg: ParkConfig
    workers: ParkControl
    weights: Weights
    lose_drafter: Callable[[], None]  # the drafter's weights not reloaded (the wake-zero-acceptance fault)
    asleep: set[str] = field(default_factory=set)  # the parts whose GPU memory is given back
    kept: bool = True  # the sleep kept a copy of the weights to restore
    block: bytearray | None = None  # the pinned backup's host RAM, kept after the wake
    wakes: int = 0

    @property
    def sleeping(self) -> bool:
        return bool(self.asleep)

    def routes(self) -> list[Route]:
        if self.cfg.flavor == "vllm":
            routes = [
                Route(vl.PATH_SLEEP.split("?")[0], self.sleep, methods=["POST"]),
                Route(vl.PATH_WAKE, self.wake, methods=["POST"]),
                Route(vl.PATH_IS_SLEEPING, self.is_sleeping),
            ]
            if "no-collective-rpc" not in self.cfg.faults:  # an older vLLM, or dev mode off
                routes.append(Route(vl.PATH_COLLECTIVE_RPC, self.collective_rpc, methods=["POST"]))
            reset = vl.PATH_RESET_PREFIX_CACHE
        else:
            routes = [
                Route(sg.PATH_RELEASE, self.sleep, methods=["POST"]),
                Route(sg.PATH_RESUME, self.wake, methods=["POST"]),
            ]
            reset = sg.PATH_FLUSH_CACHE
        if "stale-prefix-cache" not in self.cfg.faults:
            routes.append(Route(reset, self.reset_prefix_cache, methods=["POST"]))
        return routes

    async def reset_prefix_cache(self, _: Request) -> Response:
        self.weights.cached.clear()
        self.weights.stale.clear()
        return JSONResponse({"success": True})

    async def sleep(self, request: Request) -> Response:
        """The weights leave the GPU (kept in host RAM at level 1 or with SGLang's CPU backup), the KV
        cache is dropped; the process, its graphs and caches stay."""
        level = int(request.query_params.get("level", "1"))
        log(f"sleep: level {level}" if self.cfg.flavor == "vllm" else "release memory occupation")
        if not self.asleep and "sleep-keeps-memory" not in self.cfg.faults:  # a real engine's bug if kept
            await asyncio.to_thread(self.workers.release)
        if not self.asleep:
            self.kept = level == 1 if self.cfg.flavor == "vllm" else self.cfg.cpu_backup
            if self.kept and self.block is None and (self.cfg.pin_s or self.cfg.pin_bytes):
                began = asyncio.get_running_loop().time()
                self.block = await asyncio.to_thread(_pinned, self.cfg.pin_bytes)
                await asyncio.sleep(max(0.0, self.cfg.pin_s - (asyncio.get_running_loop().time() - began)))
                log(f"sleep: pinned a {self.cfg.pin_bytes / 2**20:.0f} MiB backup in {self.cfg.pin_s:.2f}s")
        self.asleep = set(PARTS)
        # The KV blocks are gone, their index is not (vllm#17103): a cached prefix now reads garbage.
        self.weights.stale |= self.weights.cached
        self.weights.cached.clear()
        return JSONResponse({"success": True})

    async def wake(self, request: Request) -> Response:
        tags = request.query_params.getlist("tags") or list(PARTS)
        log(
            f"wake up the engine with tags: {tags}"
            if self.cfg.flavor == "vllm"
            else "resume memory occupation"
        )
        if "wake-fails" in self.cfg.faults:
            return JSONResponse({"error": "CUDA out of memory while waking up"}, status_code=500)
        if "weights" in tags and "weights" in self.asleep:
            await asyncio.sleep(self.cfg.wake_s if self.kept else 0.0)  # the copy back from host RAM
            await asyncio.to_thread(self.workers.resume)
            # Memory without its content: uninitialised until reload_weights (vLLM level 2, SGLang without
            # the CPU backup), or a wake that corrupts it (the fault).
            self.weights.ok = self.weights.ok and self.kept and "wake-corrupts" not in self.cfg.faults
            if "wake-zero-acceptance" in self.cfg.faults:
                self.lose_drafter()
            self._subtle_faults()
        self.asleep -= set(tags)
        return JSONResponse({"success": True})

    async def collective_rpc(self, request: Request) -> Response:
        method = (await request.json()).get("method")
        log(f"collective_rpc: {method}")
        if method != "reload_weights":
            return JSONResponse({"error": f"no method {method!r}"}, status_code=400)
        if "weights" in self.asleep:
            return JSONResponse({"error": "the weights are asleep: wake them first"}, status_code=500)
        if self.cfg.reread is not None:  # from the page cache or the disk, as the files are now
            await asyncio.to_thread(self.cfg.reread)
        else:
            await asyncio.sleep(self.cfg.reload_s)
        self.weights.ok = True
        return JSONResponse({"results": [None]})

    def _subtle_faults(self) -> None:
        """What a wake gets slightly wrong: only the logprobs, or only later requests, show it."""
        faults, w = self.cfg.faults, self.weights
        self.wakes += 1
        if "wake-drifts" in faults or (
            "drifts-after-cycles" in faults and self.wakes >= self.cfg.fault_after
        ):
            w.drift = 0.05
        if "wake-corrupts-shard" in faults:
            w.shard = 3
        if "wake-then-fails" in faults:
            w.failing = True
        if "wake-loses-lora" in faults:  # the adapters not restored (vllm#53888): served as the base model
            w.adapters = dict.fromkeys(w.adapters, False)

    async def is_sleeping(self, _: Request) -> Response:
        return JSONResponse({"is_sleeping": self.sleeping})


def _pinned(size: int) -> bytearray:
    """`size` bytes of host RAM, every page touched (resident, as pinned pages are)."""
    block = bytearray(size)
    view = memoryview(block)
    view[:: mmap.PAGESIZE] = b"\x01" * len(range(0, size, mmap.PAGESIZE))
    return block
