"""Teardown, steps two and three: execute a plan (SIGTERM, wait for the exits, SIGKILL the rest, wait
again; remove the planned shm files) and verify the GPUs (no compute process, memory back to idle, stable
over consecutive samples). `Teardown` ties snapshot, plan, execute and verify together for the switch."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from daemon.core.errors import Refused
from daemon.host.gpu import GpuInfo, GpuUnavailable, GpuView
from daemon.host.procs import ProcessView
from daemon.host.shm import ShmView
from daemon.host.signals import ProcessControl, ProcHandle
from daemon.teardown.plan import (
    Parked,
    Snapshot,
    TeardownPlan,
    TeardownPolicy,
    Victim,
    plan,
    plan_shm,
)
from daemon.teardown.report import GpuCheck, ProcessOutcome, TeardownReport, VerifyResult


async def execute(
    p: TeardownPlan,
    control: ProcessControl,
    *,
    term_grace_s: float,
    kill_grace_s: float,
    orphan_grace_s: float | None = None,
) -> TeardownReport:
    """SIGTERM to every victim; orphaned engine processes get SIGKILL after `orphan_grace_s` (a real
    orphaned EngineCore ignores SIGTERM), the rest after `term_grace_s`; then wait for the kills."""
    report = TeardownReport(spared=list(p.spared))
    orphan_grace = min(term_grace_s, orphan_grace_s if orphan_grace_s is not None else term_grace_s)
    outcomes = {v.pid: _outcome(v, orphan_grace if v.orphan else term_grace_s) for v in p.victims}
    report.processes = list(outcomes.values())
    handles = []
    for v in p.victims:
        h = control.open(v.pid, v.started)
        if h is None:
            outcomes[v.pid].outcome = "gone before the signal"
        else:
            handles.append(h)

    def send(targets: list[ProcHandle], sig: signal.Signals) -> None:
        for h in targets:
            if control.send(h, sig):
                outcomes[h.pid].signals.append(sig.name)

    try:
        began = time.monotonic()
        send(handles, signal.SIGTERM)
        exited: set[int] = set()
        killed_early: list[ProcHandle] = []
        for grace in sorted({outcomes[h.pid].grace_s for h in handles}):
            waiting = [h for h in handles if h.pid not in exited and h not in killed_early]
            exited |= await control.wait_exits(waiting, max(0.0, grace - (time.monotonic() - began)))
            due = [h for h in waiting if h.pid not in exited and outcomes[h.pid].grace_s <= grace]
            send(due, signal.SIGKILL)
            killed_early += due
        for pid in exited:
            outcomes[pid].outcome = "exited after SIGTERM"
        report.steps["sigterm_s"] = time.monotonic() - began
        if killed_early:
            began = time.monotonic()
            killed = await control.wait_exits(killed_early, kill_grace_s)
            for h in killed_early:
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


def _outcome(v: Victim, grace_s: float) -> ProcessOutcome:
    return ProcessOutcome(
        v.pid,
        v.title,
        list(v.reasons),
        v.foreign,
        v.gpu_mib,
        orphan=v.orphan,
        grace_s=grace_s,
        gpus=list(v.gpus),
    )


async def verify(
    gpus: GpuView,
    indices: tuple[int, ...] | None,
    *,
    idle_mib: Mapping[int, int],
    slack_mib: int,
    samples: int,
    within_s: float,
    interval_s: float = 0.005,
    parked: tuple[Parked, ...] = (),
) -> VerifyResult:
    """Every GPU in scope: no compute process and used memory within `slack_mib` of its idle baseline, for
    `samples` consecutive reads; a parked engine may keep its processes there and the residual it had
    when parked, nothing more. NVML has no event for freed memory, so this one wait samples."""
    kept = frozenset(pid for pk in parked for pid in pk.pids)
    residual: Counter[int] = Counter()  # GPU index -> MiB the parked engines may keep there
    for pk in parked:
        residual.update(pk.residual_mib)
    began = time.monotonic()
    streak, reads = 0, 0
    checks: list[GpuCheck] = []
    while True:
        reads += 1
        try:
            seen = await asyncio.to_thread(gpus.gpus, light=True)
        except GpuUnavailable as e:
            return VerifyResult(False, [], reads, time.monotonic() - began, f"cannot verify the GPUs: {e}")
        if unseen := _unseen(gpus, seen, indices):
            return VerifyResult(False, [], reads, time.monotonic() - began, unseen)
        checks = [
            GpuCheck(
                g.index,
                g.memory_used_mib,
                idle_mib.get(g.index, 0) + slack_mib + residual.get(g.index, 0),
                [p.pid for p in g.processes if p.pid not in kept],
            )
            for g in seen
            if indices is None or g.index in indices
        ]
        streak = streak + 1 if all(c.clean for c in checks) else 0
        elapsed = time.monotonic() - began
        if streak >= samples:
            return VerifyResult(True, checks, reads, elapsed, "GPUs clean")
        if elapsed >= within_s:
            dirty = [c for c in checks if not c.clean]
            msg = "; ".join(
                f"GPU {c.index}: {c.used_mib} MiB used (limit {c.limit_mib}), pids {c.pids}" for c in dirty
            )
            return VerifyResult(False, checks, reads, elapsed, msg)
        await asyncio.sleep(interval_s)  # the sampling period; see the docstring


def _unseen(view: GpuView, seen: list[GpuInfo], indices: tuple[int, ...] | None) -> str | None:
    """Where GPUs are expected, one that cannot be seen fails the verification (never "clean" over an
    empty list)."""
    if not view.required:
        return None
    visible = sorted(g.index for g in seen)
    if not visible:
        return "no GPU is visible: cannot verify that the GPUs are clean"
    missing = [i for i in indices or () if i not in visible]
    if missing:
        return f"GPU {', '.join(map(str, missing))} not visible (visible: {', '.join(map(str, visible))})"
    return None


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
        orphan_grace_s: float | None = None,
        self_pid: int | None = None,
    ) -> None:
        self.procs = procs
        self.gpus = gpus
        self.shm = shm
        self.control = control
        self.policy = policy
        self.term_grace_s = term_grace_s
        self.kill_grace_s = kill_grace_s
        self.orphan_grace_s = orphan_grace_s
        self.verify_timeout_s = verify_timeout_s
        self.verify_samples = verify_samples
        self.slack_mib = slack_mib
        self.self_pid = self_pid or os.getpid()
        self.idle_mib: dict[int, int] = {}  # lowest memory seen on each GPU with no process on it

    async def _snapshot(
        self,
        unit_cgroups: Mapping[str, str],
        managed_units: tuple[str, ...],
        ports: tuple[int, ...],
        *,
        full: bool = True,
    ) -> Snapshot:
        """GPUs, processes (one scan gives device and shm holders) and /dev/shm, read side by side. Not
        `full`: no open-fd scan (victims are chosen by GPU context, mappings, titles and cgroups; the
        shm files are decided after the kills, from a fresh scan)."""
        shm_glob = f"{self.shm.directory}/*"

        async def read_gpus() -> tuple[list[GpuInfo], str | None]:
            # Without NVML the plan still goes by cgroups, device mappings and titles; verify then fails.
            try:
                return await asyncio.to_thread(self.gpus.gpus, light=True), None
            except GpuUnavailable as e:
                return [], str(e)

        (gpus, gpu_error), procs, listeners = await asyncio.gather(
            read_gpus(),
            asyncio.to_thread(self.procs.snapshot, self.policy.device_glob, shm_glob, with_fds=full),
            asyncio.to_thread(self.procs.listeners, ports),
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
            gpu_error=gpu_error,
            listeners=listeners,
        )

    def cgroup_pids(self, control_group: str) -> list[int]:
        """The processes of a unit's cgroup now (blocking: a thread)."""
        return self.procs.cgroup_pids(control_group)

    def access_problem(self) -> str | None:
        """Why the teardown cannot see other processes' memory maps, if it cannot (blocking: a thread)."""
        return self.procs.access_problem()

    async def plan(
        self,
        gpus: tuple[int, ...] | None = None,
        unit_cgroups: Mapping[str, str] | None = None,
        managed_units: tuple[str, ...] = (),
        ports: tuple[int, ...] = (),
        *,
        full: bool = True,
        parked: tuple[Parked, ...] = (),
    ) -> TeardownPlan:
        snap = await self._snapshot(unit_cgroups or {}, managed_units, ports, full=full)
        return plan(replace(snap, parked=parked), replace(self.policy, gpus=gpus))

    async def verify_parked(
        self, gpus: tuple[int, ...], parked: Parked, others: tuple[Parked, ...] = ()
    ) -> VerifyResult:
        """After a sleep: on its GPUs only its processes within its residual, and those parked before it."""
        return await self._verify(gpus, (parked, *others))

    async def _verify(self, gpus: tuple[int, ...] | None, parked: tuple[Parked, ...]) -> VerifyResult:
        return await verify(
            self.gpus,
            gpus,
            idle_mib=self.idle_mib,
            slack_mib=self.slack_mib,
            samples=self.verify_samples,
            within_s=self.verify_timeout_s,
            parked=parked,
        )

    async def run(
        self,
        gpus: tuple[int, ...] | None = None,
        unit_cgroups: Mapping[str, str] | None = None,
        managed_units: tuple[str, ...] = (),
        ports: tuple[int, ...] = (),
        parked: tuple[Parked, ...] = (),
    ) -> TeardownReport:
        """`ports`: the TCP ports the next engine needs; a process that holds one and is not an engine
        makes the teardown refuse before it signals anything. `parked`: engines asleep on purpose, spared
        and allowed their residual."""
        run_began = time.monotonic()
        p = await self.plan(gpus, unit_cgroups, managed_units, ports, full=False, parked=parked)
        planned = time.monotonic() - run_began
        if p.is_refused:
            names = ", ".join(f"{v.pid} ({v.title})" for v in p.refused)
            raise Refused(f"foreign GPU processes under policy 'refuse': {names}")
        if p.port_blocked:
            raise Refused(
                "; ".join(map(str, p.port_blocked)) + ": not an engine, so k25-ctl will not kill it"
            )
        report = await execute(
            p,
            self.control,
            term_grace_s=self.term_grace_s,
            kill_grace_s=self.kill_grace_s,
            orphan_grace_s=self.orphan_grace_s,
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
            self._verify(gpus, parked), clean_shm(self.shm, self.policy.shm_patterns, report)
        )
        report.verify = checked
        report.steps["verify_s"] = checked.seconds
        report.steps["total_s"] = time.monotonic() - run_began
        if not checked.ok:
            report.error = f"GPUs not clean after {checked.seconds:.1f}s: {checked.message}"
        return report
