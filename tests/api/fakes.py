"""Fake host ports for API tests: units that start at once and print a scripted load, an engine whose
probe can be held open (to keep a switch busy) or made to fail."""

from __future__ import annotations

import asyncio
import collections
import fnmatch
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from daemon.core.errors import UnitNotFound
from daemon.core.jsontypes import RequestBody
from daemon.core.profiles import Profile
from daemon.engines.answers import Answer, AnswerRequest
from daemon.engines.base import Engine
from daemon.engines.client import ProbeFailed, ProbeProgress
from daemon.host.gpu import GpuInfo, GpuUnavailable, GpuView, NoGpus
from daemon.host.journal import JournalRecord
from daemon.host.procs import ProcInfo
from daemon.host.shm import ShmEntry
from daemon.host.signals import PidfdControl
from daemon.host.systemd import RUNNING, JobOutcome, UnitState
from daemon.host.timers import TimerSpec, TimerState
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import TeardownPolicy

LOAD = [f"Loading safetensors checkpoint shards: {p:3d}% Completed | {n}/4 [00:01<00:01, 1.00it/s]"
        for p, n in ((0, 0), (25, 1), (50, 2), (75, 3), (100, 4))]  # fmt: skip
LOAD.append("INFO 11-30 07:34:02 [default_loader.py:268] Loading weights took 1.50 seconds")
READY = "INFO:     Application startup complete."


class FakeJournal:
    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self.queues: dict[str, list[asyncio.Queue[str]]] = {}
        self.unreadable: set[str] = set()  # units whose journal cannot be followed (journalctl missing...)
        self.delivered = asyncio.Event()  # cleared: lines wait (a journal lagging behind the engine)
        self.delivered.set()

    def log(self, unit: str, line: str) -> None:
        self.lines.setdefault(unit, []).append(line)
        for q in self.queues.get(unit, []):
            q.put_nowait(line)

    @asynccontextmanager
    async def follow(
        self, unit: str, *, after_cursor: str | None = None
    ) -> AsyncIterator[AsyncIterator[JournalRecord]]:
        if unit in self.unreadable:
            raise FileNotFoundError(2, "No such file or directory", "journalctl")
        q: asyncio.Queue[str] = asyncio.Queue()
        self.queues.setdefault(unit, []).append(q)

        async def records() -> AsyncIterator[JournalRecord]:
            while True:
                line = await q.get()
                await self.delivered.wait()
                yield JournalRecord(unit, line, 1, 6, 0.0, "c")

        try:
            yield records()
        finally:
            self.queues[unit].remove(q)

    async def tail(self, unit: str, lines: int) -> list[JournalRecord]:
        return [JournalRecord(unit, m, 1, 6, 0.0, "c") for m in self.lines.get(unit, [])[-lines:]]

    async def cursor(self) -> str | None:
        return "c"


class FakeSystemd:
    def __init__(self, journal: FakeJournal, known: set[str]) -> None:
        self.journal, self.known = journal, known
        self.states: dict[str, UnitState] = {}
        self.watchers: dict[str, list[asyncio.Queue[UnitState]]] = {}
        self.crash: set[str] = set()

    def _set(self, unit: str, active: str, sub: str, result: str = "success") -> UnitState:
        st = UnitState(
            unit,
            "loaded",
            active,
            sub,
            result,
            100 if active == "active" else 0,
            f"/system.slice/{unit}",
            0,
            0,
        )
        self.states[unit] = st
        for q in self.watchers.get(unit, []):
            q.put_nowait(st)
        return st

    async def running(self, pattern: str) -> list[str]:
        return sorted(
            u
            for u, st in self.states.items()
            if fnmatch.fnmatchcase(u, pattern) and st.active_state in RUNNING
        )

    async def state(self, unit: str) -> UnitState:
        if unit not in self.known:
            raise UnitNotFound(f"unit {unit} not found")
        return self.states.get(unit) or UnitState(unit, "loaded", "inactive", "dead", "success", 0, "", 0, 0)

    async def start(self, unit: str, *, within_s: float) -> JobOutcome:
        st = self._set(unit, "active", "running")
        for line in LOAD:
            self.journal.log(unit, line)
        if unit in self.crash:
            self.journal.log(unit, "torch.OutOfMemoryError: CUDA out of memory.")
            self._set(unit, "failed", "failed", "exit-code")
        else:
            self.journal.log(unit, READY)
        return JobOutcome(unit, "start", "done", st, 0.01)

    async def stop(self, unit: str, *, within_s: float) -> JobOutcome:
        return JobOutcome(unit, "stop", "done", self._set(unit, "inactive", "dead"), 0.01)

    async def reset_failed(self, unit: str) -> None:
        if unit in self.states and self.states[unit].active_state == "failed":
            self.states[unit] = replace(self.states[unit], active_state="inactive", sub_state="dead")

    @asynccontextmanager
    async def watch(self, unit: str) -> AsyncIterator[AsyncIterator[UnitState]]:
        q: asyncio.Queue[UnitState] = asyncio.Queue()
        self.watchers.setdefault(unit, []).append(q)

        async def states() -> AsyncIterator[UnitState]:
            yield await self.state(unit)
            while True:
                yield await q.get()

        try:
            yield states()
        finally:
            self.watchers[unit].remove(q)


class FakeProber:
    """Healthy once its unit is active; `gate` holds the probe open, `broken` makes it fail."""

    def __init__(self, systemd: FakeSystemd) -> None:
        self.systemd = systemd
        self.gate = asyncio.Event()
        self.gate.set()
        self.scrapes = asyncio.Event()  # cleared: every /metrics read hangs, as a hung engine's does
        self.scrapes.set()
        self.broken: set[str] = set()
        self.metrics: dict[str, str] = {}  # profile -> its /metrics text
        self.calls: list[tuple[str, str]] = []  # control endpoints posted (parking)
        self.call_status: int | None = 200
        self.json_answers: dict[tuple[str, str], dict[str, object]] = {}
        self.garbled: set[str] = set()  # profiles whose known-answer requests get garbage
        self.answers_asked: list[str] = []
        # profile -> texts served one per scrape, in order, before `metrics` (a test drives each scrape)
        self.scripted: dict[str, collections.deque[str]] = {}

    async def health(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> int | None:
        st = self.systemd.states.get(profile.unit)
        return 200 if st is not None and st.active_state == "active" else None

    async def scrape(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> dict[str, str]:
        await self.scrapes.wait()
        st = self.systemd.states.get(profile.unit)
        if st is None or st.active_state != "active":
            return {}
        script = self.scripted.get(profile.name)
        text = script.popleft() if script else self.metrics.get(profile.name, "")
        if script is not None and not script:
            self.metrics[profile.name] = text  # the last scripted text stays
        return {engine.metrics_path(profile) or "/metrics": text}

    async def generate(self, profile: Profile, engine: Engine, progress: ProbeProgress) -> int:
        await self.gate.wait()
        if profile.name in self.broken:
            raise ProbeFailed("probe completion answered HTTP 500")
        progress.chunks += 1
        return 1

    async def call(
        self, profile: Profile, path: str, *, timeout_s: float, body: RequestBody | None = None
    ) -> int | None:
        self.calls.append((profile.name, path))
        return self.call_status

    async def answer(self, profile: Profile, engine: Engine, req: AnswerRequest) -> Answer:
        """A greedy answer that depends on the prompt; `garbled` profiles answer garbage."""
        self.answers_asked.append(profile.name)
        if profile.name in self.garbled:
            return Answer(req.kind, req.prompt, " !!" * 4, (" !!",) * 4)
        words = tuple(" " + w for w in req.prompt.split()[: req.max_tokens])  # tokens as SGLang gives them
        return Answer(req.kind, req.prompt, "".join(words), words)

    async def read_json(self, profile: Profile, path: str) -> dict[str, object] | None:
        return self.json_answers.get((profile.name, path))

    async def aclose(self) -> None:
        return None


class NoProcs:
    def snapshot(
        self, device_glob: str, shm_glob: str | None = None, *, with_fds: bool = True
    ) -> list[ProcInfo]:
        return []

    def cgroup_pids(self, control_group: str) -> list[int]:
        return []

    def listeners(self, ports: tuple[int, ...]) -> dict[int, list[int | None]]:
        return {}

    def access_problem(self) -> str | None:
        return None

    def mapped(self, pattern: str) -> dict[str, set[int]]:
        return {}


class NoShm:
    from pathlib import Path

    directory = Path("/nonexistent-shm")

    def entries(self, holders: object = None) -> list[ShmEntry]:
        return []

    def users(self) -> dict[str, set[int]]:
        return {}

    def remove(self, entry: ShmEntry, holders: object = None) -> str | None:
        return "fake"


class BrokenNvml:
    """NVML that fails on every read (a driver gone bad): GPUs are expected but cannot be seen."""

    required = True

    def gpus(self, *, light: bool = False) -> list[GpuInfo]:
        raise GpuUnavailable("NVML failed: Unknown Error")

    def driver_version(self) -> str | None:
        return None


def fake_teardown(gpus: GpuView | None = None) -> Teardown:
    policy = TeardownPolicy("/dev/nvidia*", ("VLLM::*",), ("psm_*",), ())
    return Teardown(NoProcs(), gpus or NoGpus(), NoShm(), PidfdControl(), policy, term_grace_s=1, kill_grace_s=1,
                    verify_timeout_s=1, verify_samples=1, slack_mib=0)  # fmt: skip


class FakeTimers:
    """Transient timers as systemd keeps them (fired only when a test calls the schedule's fire)."""

    def __init__(self) -> None:
        self.units: dict[str, TimerSpec] = {}

    async def create(self, spec: TimerSpec) -> None:
        self.units[f"{spec.name}.timer"] = spec

    async def timers(self, pattern: str) -> list[TimerState]:
        return [TimerState(unit, "active", 4_102_444_800_000_000) for unit in self.units]

    async def remove(self, unit: str) -> None:
        if self.units.pop(unit, None) is None:
            raise UnitNotFound(f"unit {unit} not found")
