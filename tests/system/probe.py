"""Scenarios that run INSIDE a sandbox (its PID and mount namespaces, its D-Bus, its journal), through the
real host layer, and print one JSON result for the test outside to assert on.
`nsenter ... python -m tests.system.probe SCENARIO UNIT [PROFILE]`"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from typing import Any

import httpx

from daemon.core.profile_files import load_profiles
from daemon.core.profiles import Profile
from daemon.core.settings import load_settings
from daemon.engines import engine_for
from daemon.engines.engine_types import LogKind
from daemon.host.gpu import SimulatedGpus
from daemon.host.journal import JournalctlJournal
from daemon.host.procs import ProcfsProcesses
from daemon.host.shm import DevShm
from daemon.host.systemd import SdbusSystemd, open_system_bus

DEADLINE_S = 60.0


def _profile(name: str) -> Profile:
    s = load_settings()
    return load_profiles(s.profiles_path).valid[name].profile


async def _start_and_wait_ready(systemd: SdbusSystemd, journal: JournalctlJournal, p: Profile) -> list[str]:
    """Start the profile's unit and follow its journal until the engine's ready marker."""
    engine = engine_for(p)
    seen = []
    async with journal.follow(p.unit) as records:
        await systemd.start(p.unit, within_s=30)
        async with asyncio.timeout(DEADLINE_S):
            async for rec in records:
                seen.append(rec.message)
                ev = engine.classify_line(rec.message)
                if ev is not None and ev.kind is LogKind.READY:
                    return seen
    return seen


async def jobs(unit: str) -> dict[str, Any]:
    systemd = SdbusSystemd(open_system_bus())
    out = {}
    for action, call in (("start", systemd.start), ("start_again", systemd.start), ("stop", systemd.stop)):
        o = await call(unit, within_s=30)
        out[action] = {"job_result": o.job_result, "state": asdict(o.state), "escalated": o.stop_escalated}
    try:
        await systemd.start("no-such-unit.service", within_s=5)
    except Exception as e:  # the error type is the result
        out["unknown"] = {"type": type(e).__name__, "message": str(e)}
    return out


async def stop_ready(unit: str, profile: str) -> dict[str, Any]:
    """Stop an engine that is up and serving (its signal handling installed)."""
    systemd = SdbusSystemd(open_system_bus())
    await _start_and_wait_ready(
        systemd, JournalctlJournal(load_settings().journal_command), _profile(profile)
    )
    o = await systemd.stop(unit, within_s=30)
    return {
        "job_result": o.job_result,
        "state": asdict(o.state),
        "escalated": o.stop_escalated,
        "s": o.seconds,
    }


async def start_ready(unit: str, profile: str) -> list[dict[str, Any]]:
    """Start an engine, wait until it serves, and list its processes (title, cgroup, parent)."""
    s = load_settings()
    systemd = SdbusSystemd(open_system_bus())
    await _start_and_wait_ready(systemd, JournalctlJournal(s.journal_command), _profile(profile))
    return await engine_procs()


async def engine_procs() -> list[dict[str, Any]]:
    s = load_settings()
    return [
        {"pid": p.pid, "ppid": p.ppid, "title": p.title, "cgroup": p.cgroup, "mapped": list(p.mapped_devices)}
        for p in ProcfsProcesses().snapshot(s.gpu_device_glob)
        if p.title.startswith(("VLLM::", "sglang::"))
    ]


BYSTANDER = """
import signal, sys
f = open(sys.argv[1], "w"); f.write("pg"); f.flush()
print("ready", flush=True)
signal.pause()
"""


async def teardown() -> dict[str, Any]:
    """Orphan of a stopped unit, leaked shm of another, a SIGTERM-ignoring engine started by hand, and
    bystanders (one holding a PostgreSQL shm file): teardown kills what it must and nothing else."""
    import os
    import subprocess

    from daemon.host.procs import ProcfsProcesses as Procs
    from daemon.teardown.build import build_teardown
    from k25_sandbox.ports import free_port

    s = load_settings()
    systemd = SdbusSystemd(open_system_bus())
    jr = JournalctlJournal(s.journal_command)
    for name in ("orphaner", "leaky"):
        p = _profile(name)
        await _start_and_wait_ready(systemd, jr, p)
        await systemd.stop(p.unit, within_s=30)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="2")
    # Our own children, started by hand (outside any unit); killed by PID in `finally` whatever happens.
    stubborn = subprocess.Popen(
        [sys.executable, "-m", "k25_sandbox.fake_engine", "--flavor", "vllm", "--port", str(free_port()),
         "--load-seconds", "0.2", "--fault", "ignore-sigterm"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    bystander = subprocess.Popen(
        [sys.executable, "-c", BYSTANDER, str(s.shm_dir / "PostgreSQL.1234")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert stubborn.stdout is not None
        assert bystander.stdout is not None
        for line in stubborn.stdout:
            if "Application startup complete." in line:
                break
        bystander.stdout.readline()
        shm_before = sorted(e.name for e in DevShm(s.shm_dir).entries())
        gpus_before = [g.memory_used_mib for g in SimulatedGpus(Procs(), s.gpu_device_glob, count=8).gpus()]
        units = tuple(lp.profile.unit for lp in load_profiles(s.profiles_path).valid.values())
        report = await build_teardown(s).run(managed_units=units)
        return {
            "report": report.to_dict(),
            "shm_before": shm_before,
            "shm_after": sorted(e.name for e in DevShm(s.shm_dir).entries()),
            "gpus_before": gpus_before,
            "bystander_alive": bystander.poll() is None,
            "stubborn_pid": stubborn.pid,
            "stubborn_alive": stubborn.poll() is None,  # its front end holds no GPU: not a victim
        }
    finally:
        for child in (stubborn, bystander):
            child.kill()
            child.wait()


async def crash(unit: str) -> dict[str, Any]:
    """Start a unit whose engine crashes while loading; the state stream must say so on its own."""
    systemd = SdbusSystemd(open_system_bus())
    states = []
    async with systemd.watch(unit) as stream:
        await systemd.start(unit, within_s=30)
        async with asyncio.timeout(DEADLINE_S):
            async for st in stream:
                states.append((st.active_state, st.sub_state))
                if st.active_state == "failed":
                    seen_at = time.time()
                    break
    latency = seen_at - st.exit_timestamp_us / 1e6
    await systemd.reset_failed(unit)
    return {"states": states, "result": st.result, "status": st.exec_main_status, "latency_s": latency}


async def journal(unit: str, profile: str) -> dict[str, Any]:
    """Follow a crashing engine's journal from now: progress lines in order, then errors."""
    systemd = SdbusSystemd(open_system_bus())
    jr = JournalctlJournal(load_settings().journal_command)
    engine = engine_for(_profile(profile))
    progress, errors = [], []
    async with systemd.watch(unit) as stream, jr.follow(unit) as records:
        await systemd.start(unit, within_s=30)
        async with asyncio.timeout(DEADLINE_S):
            async for st in stream:
                if st.is_down and st.active_state == "failed":
                    break
        async with asyncio.timeout(DEADLINE_S):
            async for rec in records:
                ev = engine.classify_line(rec.message)
                if ev is not None and ev.kind is LogKind.PROGRESS:
                    progress.append([ev.percent, ev.done, ev.total])
                elif ev is not None and ev.kind is LogKind.ERROR:
                    errors.append({"unit": rec.unit, "line": rec.message})
                if "Failed with result" in rec.message:  # systemd's own last word on the unit
                    break
    tail = await jr.tail(unit, 5)
    await systemd.reset_failed(unit)
    return {"progress": progress, "errors": errors, "tail": [r.message for r in tail]}


async def views(unit: str, profile: str) -> dict[str, Any]:
    """Procs, shm and the simulated GPU see a running fake engine; its memory goes when it dies."""
    s = load_settings()
    systemd = SdbusSystemd(open_system_bus())
    jr = JournalctlJournal(s.journal_command)
    procs = ProcfsProcesses()
    gpus = SimulatedGpus(procs, s.gpu_device_glob, count=s.sim_gpu_count)
    before = [g.memory_used_mib for g in gpus.gpus()]
    await _start_and_wait_ready(systemd, jr, _profile(profile))
    state = await systemd.state(unit)
    snap = procs.snapshot(s.gpu_device_glob)
    engine_procs = [
        {
            "pid": p.pid,
            "title": p.title,
            "state": p.state,
            "cgroup": p.cgroup,
            "mapped": list(p.mapped_devices),
        }
        for p in snap
        if p.title.startswith(("VLLM::", "sglang::"))
    ]
    shm = [asdict(e) for e in DevShm(s.shm_dir).entries()]
    during = [asdict(g) for g in gpus.gpus()]
    cgroup_pids = procs.cgroup_pids(state.control_group)
    await systemd.stop(unit, within_s=30)
    after = [g.memory_used_mib for g in gpus.gpus()]
    return {
        "engine_procs": engine_procs,
        "shm": shm,
        "gpus_before": before,
        "gpus_during": during,
        "gpus_after": after,
        "cgroup_pids": cgroup_pids,
        "main_pid": state.main_pid,
    }


async def metrics(unit: str, profile: str) -> dict[str, Any]:
    """Scrape, generate, scrape: the engines/ parsers turn the fake's counters into its acceptance."""
    systemd = SdbusSystemd(open_system_bus())
    jr = JournalctlJournal(load_settings().journal_command)
    p = _profile(profile)
    engine = engine_for(p)
    await _start_and_wait_ready(systemd, jr, p)
    async with httpx.AsyncClient(base_url=p.base_url, timeout=30) as client:
        before = engine.parse_metrics((await client.get(engine.metrics_path(p) or "/metrics")).text)
        body = {"model": p.served_model_name, "prompt": "hello", "max_tokens": 400, "stream": False}
        r = await client.post("/v1/completions", json=body)
        r.raise_for_status()
        after = engine.parse_metrics((await client.get(engine.metrics_path(p) or "/metrics")).text)
    await systemd.stop(unit, within_s=30)
    return asdict(engine.usage_delta(p, before, after))


SCENARIOS: dict[str, Callable[..., Coroutine[Any, Any, Any]]] = {
    "jobs": jobs,
    "stop_ready": stop_ready,
    "start_ready": start_ready,
    "teardown": teardown,
    "engine_procs": engine_procs,
    "crash": crash,
    "journal": journal,
    "views": views,
    "metrics": metrics,
}

if __name__ == "__main__":
    result = asyncio.run(SCENARIOS[sys.argv[1]](*sys.argv[2:]))
    sys.stdout.write(json.dumps(result) + "\n")
