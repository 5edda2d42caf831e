"""Teardown, steps two and three: execute a plan (SIGTERM, wait for the exits, SIGKILL the rest, wait
again; remove the planned shm files) and verify the GPUs (no compute process, memory back to idle, stable
over consecutive samples). `Teardown` ties snapshot, plan, execute and verify together for the switch."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from daemon.errors import Refused
from daemon.host.gpu import GpuView
from daemon.host.procs import ProcessView
from daemon.host.shm import ShmView
from daemon.host.signals import ProcessControl, ProcHandle
from daemon.teardown import Snapshot, TeardownPlan, TeardownPolicy, Victim, plan, plan_shm


@dataclass
class ProcessOutcome:
    pid: int
    title: str
    reasons: list[str]
    foreign: bool
    gpu_mib: int | None
    signals: list[str] = field(default_factory=list)
    outcome: str = ""  # exited after SIGTERM | killed by SIGKILL | survived SIGKILL | gone before the signal
    state: str = ""
    wchan: str = ""


@dataclass
class GpuCheck:
    index: int
    used_mib: int
    limit_mib: int
    pids: list[int]

    @property
    def clean(self) -> bool:
        return not self.pids and self.used_mib <= self.limit_mib


@dataclass
class VerifyResult:
    ok: bool
    gpus: list[dict[str, Any]]
    samples: int
    seconds: float
    message: str


@dataclass
class TeardownReport:
    processes: list[ProcessOutcome] = field(default_factory=list)
    spared: list[dict[str, Any]] = field(default_factory=list)
    shm_removed: list[str] = field(default_factory=list)
    shm_kept: list[dict[str, str]] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    needs_reset: list[ProcessOutcome] = field(default_factory=list)
    verify: VerifyResult | None = None
    refused: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.needs_reset and (self.verify is None or self.verify.ok)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ok": self.ok}


async def execute(
    p: TeardownPlan,
    control: ProcessControl,
    *,
    term_grace_s: float,
    kill_grace_s: float,
) -> TeardownReport:
    report = TeardownReport(spared=[asdict(s) for s in p.spared])
    outcomes = {v.pid: _outcome(v) for v in p.victims}
    report.processes = list(outcomes.values())
    handles = []
    for v in p.victims:
        h = control.open(v.pid, v.started)
        if h is None:
            outcomes[v.pid].outcome = "gone before the signal"
        else:
            handles.append(h)

    async def signal_and_wait(targets: list[ProcHandle], sig: signal.Signals, within_s: float) -> set[int]:
        for h in targets:
            if control.send(h, sig):
                outcomes[h.pid].signals.append(sig.name)
        return await control.wait_exits(targets, within_s)

    try:
        began = time.monotonic()
        exited = await signal_and_wait(handles, signal.SIGTERM, term_grace_s)
        for pid in exited:
            outcomes[pid].outcome = "exited after SIGTERM"
        report.steps["sigterm_s"] = time.monotonic() - began
        rest = [h for h in handles if h.pid not in exited]
        if rest:
            began = time.monotonic()
            killed = await signal_and_wait(rest, signal.SIGKILL, kill_grace_s)
            for h in rest:
                o = outcomes[h.pid]
                if h.pid in killed:
                    o.outcome = "killed by SIGKILL"
                else:
                    # Alive after SIGKILL: stuck in the kernel (D state in the driver); only a reset helps.
                    o.outcome = "survived SIGKILL"
                    o.state, o.wchan = control.describe(h.pid)
                    report.needs_reset.append(o)
            report.steps["sigkill_s"] = time.monotonic() - began
    finally:
        for h in handles:
            control.close(h)
    return report


async def clean_shm(shm: ShmView, patterns: tuple[str, ...], report: TeardownReport) -> None:
    """After the victims are gone: one fresh scan of who holds what, then remove the engine files that
    nobody holds (each re-checked right before its unlink)."""
    began = time.monotonic()

    def work() -> None:
        holders = shm.users()
        remove, keep = plan_shm(shm.entries(holders), patterns, victim_pids=set())
        report.shm_kept = [{"name": d.entry.name, "reason": d.reason} for d in keep]
        for d in remove:
            why_kept = shm.remove(d.entry, holders)
            if why_kept is None:
                report.shm_removed.append(d.entry.name)
            else:
                report.shm_kept.append({"name": d.entry.name, "reason": why_kept})

    await asyncio.to_thread(work)
    report.steps["shm_s"] = time.monotonic() - began


def _outcome(v: Victim) -> ProcessOutcome:
    return ProcessOutcome(v.pid, v.title, list(v.reasons), v.foreign, v.gpu_mib)


async def verify(
    gpus: GpuView,
    indices: tuple[int, ...] | None,
    *,
    idle_mib: Mapping[int, int],
    slack_mib: int,
    samples: int,
    within_s: float,
    interval_s: float = 0.005,
) -> VerifyResult:
    """Every GPU in scope: no compute process and used memory within `slack_mib` of its idle baseline, for
    `samples` consecutive reads. NVML has no event for freed memory, so this one wait samples."""
    began = time.monotonic()
    streak, reads = 0, 0
    checks: list[GpuCheck] = []
    while True:
        reads += 1
        checks = [
            GpuCheck(
                g.index, g.memory_used_mib, idle_mib.get(g.index, 0) + slack_mib, [p.pid for p in g.processes]
            )
            for g in await asyncio.to_thread(gpus.gpus, light=True)
            if indices is None or g.index in indices
        ]
        streak = streak + 1 if all(c.clean for c in checks) else 0
        elapsed = time.monotonic() - began
        if streak >= samples:
            return VerifyResult(
                True, [asdict(c) | {"clean": True} for c in checks], reads, elapsed, "GPUs clean"
            )
        if elapsed >= within_s:
            dirty = [c for c in checks if not c.clean]
            msg = "; ".join(
                f"GPU {c.index}: {c.used_mib} MiB used (limit {c.limit_mib}), pids {c.pids}" for c in dirty
            )
            return VerifyResult(False, [asdict(c) | {"clean": c.clean} for c in checks], reads, elapsed, msg)
        await asyncio.sleep(interval_s)  # the sampling period; see the docstring


class Teardown:
    """Snapshot -> plan -> execute -> verify, over the host ports it is given."""

    def __init__(
        self,
        procs: ProcessView,
        gpus: GpuView,
        shm: ShmView,
        control: ProcessControl,
        policy: TeardownPolicy,
        *,
        term_grace_s: float,
        kill_grace_s: float,
        verify_timeout_s: float,
        verify_samples: int,
        slack_mib: int,
        self_pid: int | None = None,
    ) -> None:
        self.procs, self.gpus, self.shm, self.control, self.policy = procs, gpus, shm, control, policy
        self.term_grace_s, self.kill_grace_s = term_grace_s, kill_grace_s
        self.verify_timeout_s, self.verify_samples, self.slack_mib = (
            verify_timeout_s,
            verify_samples,
            slack_mib,
        )
        self.self_pid = self_pid or os.getpid()
        self.idle_mib: dict[int, int] = {}  # lowest memory seen on each GPU with no process on it

    async def _snapshot(
        self, unit_cgroups: Mapping[str, str], managed_units: tuple[str, ...], *, full: bool = True
    ) -> Snapshot:
        """GPUs, processes (one scan gives device and shm holders) and /dev/shm, read side by side. Not
        `full`: no open-fd scan (victims are chosen by GPU context, mappings, titles and cgroups; the
        shm files are decided after the kills, from a fresh scan)."""
        shm_glob = f"{self.shm.directory}/*"
        gpus, procs = await asyncio.gather(
            asyncio.to_thread(self.gpus.gpus, light=True),
            asyncio.to_thread(self.procs.snapshot, self.policy.device_glob, shm_glob, with_fds=full),
        )
        holders: dict[str, set[int]] = {}
        for p in procs:
            for path in p.shm_files:
                holders.setdefault(path, set()).add(p.pid)
        shm = await asyncio.to_thread(self.shm.entries, holders)
        for g in gpus:
            if not g.processes:
                self.idle_mib[g.index] = min(self.idle_mib.get(g.index, g.memory_used_mib), g.memory_used_mib)
        return Snapshot(
            processes=procs,
            gpus=gpus,
            shm=shm,
            self_pid=self.self_pid,
            unit_pids={unit: self.procs.cgroup_pids(cg) for unit, cg in unit_cgroups.items() if cg},
            managed_units=managed_units,
        )

    async def plan(
        self,
        gpus: tuple[int, ...] | None = None,
        unit_cgroups: Mapping[str, str] | None = None,
        managed_units: tuple[str, ...] = (),
        *,
        full: bool = True,
    ) -> TeardownPlan:
        snap = await self._snapshot(unit_cgroups or {}, managed_units, full=full)
        return plan(snap, replace(self.policy, gpus=gpus))

    async def run(
        self,
        gpus: tuple[int, ...] | None = None,
        unit_cgroups: Mapping[str, str] | None = None,
        managed_units: tuple[str, ...] = (),
    ) -> TeardownReport:
        run_began = time.monotonic()
        p = await self.plan(gpus, unit_cgroups, managed_units, full=False)
        planned = time.monotonic() - run_began
        if p.is_refused:
            names = ", ".join(f"{v.pid} ({v.title})" for v in p.refused)
            raise Refused(f"foreign GPU processes under policy 'refuse': {names}")
        report = await execute(
            p, self.control, term_grace_s=self.term_grace_s, kill_grace_s=self.kill_grace_s
        )
        report.steps = {"plan_s": planned, **report.steps}
        if report.needs_reset:
            report.error = "needs_reset: " + "; ".join(
                f"pid {o.pid} ({o.title}) survived SIGKILL in state {o.state}, wchan {o.wchan or '?'}"
                for o in report.needs_reset
            )
            return report
        # The GPUs and /dev/shm are independent: verify while the shm files are cleaned.
        checked, _ = await asyncio.gather(
            verify(
                self.gpus,
                gpus,
                idle_mib=self.idle_mib,
                slack_mib=self.slack_mib,
                samples=self.verify_samples,
                within_s=self.verify_timeout_s,
            ),
            clean_shm(self.shm, self.policy.shm_patterns, report),
        )
        report.verify = checked
        report.steps["verify_s"] = checked.seconds
        report.steps["total_s"] = time.monotonic() - run_began
        if not checked.ok:
            report.error = f"GPUs not clean after {self.verify_timeout_s:.0f}s: {checked.message}"
        return report
