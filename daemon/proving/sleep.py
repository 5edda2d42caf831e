"""The proof that an engine sleeps: its sleep call answered, its own word where it has one, and its GPU
memory verified down to the residual it may keep. Any doubt is a NotParked with what was seen."""

from __future__ import annotations

import asyncio

from daemon.core.profiles import Profile
from daemon.engines.client import EnginePort
from daemon.engines.engine_types import ParkCalls
from daemon.teardown.execute import Teardown
from daemon.teardown.plan import Parked


class NotParked(Exception):
    """One guard said no: the reason goes on the run and the switch goes the normal way."""


async def says_sleeping(prober: EnginePort, p: Profile, calls: ParkCalls, expected: bool) -> str | None:
    """Whether the engine's own answer (where it has one) disagrees with `expected`: what it said."""
    if calls.sleeping is None:
        return None
    said = await prober.read_json(p, calls.sleeping)
    if said and said.get("is_sleeping") is expected:
        return None
    return f"GET {calls.sleeping} answered {said}"


async def asleep(
    prober: EnginePort,
    teardown: Teardown,
    p: Profile,
    calls: ParkCalls,
    unit: tuple[int, str],  # its main PID and control group
    others: tuple[Parked, ...],  # the engines parked already: allowed beside it, each its own residual
) -> dict[int, int]:
    """Sleep, confirm, and verify on the GPUs; what it still holds per GPU above idle (and above what the
    engines parked before it hold there)."""
    main_pid, cgroup = unit
    status = await prober.call(p, calls.sleep, timeout_s=p.load_timeout_s)
    if status != 200:
        raise NotParked(f"POST {calls.sleep} answered {f'HTTP {status}' if status else 'nothing'}")
    if why := await says_sleeping(prober, p, calls, True):
        raise NotParked(f"{why} after the sleep")
    members = await asyncio.to_thread(teardown.cgroup_pids, cgroup) if cgroup else []
    allowed = Parked(
        f"parking {p.name}", frozenset([main_pid, *members]), {g: p.park_residual_mib for g in p.gpus}
    )
    checked = await teardown.verify_parked(tuple(p.gpus), allowed, others)
    if not checked.ok:  # /sleep said 200 and the memory stayed (vllm-project/vllm#47654)
        raise NotParked(f"GPU memory still held after the sleep answered 200: {checked.message}")
    idle = teardown.idle_mib

    def before(g: int) -> int:
        return idle.get(g, 0) + sum(o.residual_mib.get(g, 0) for o in others)

    return {c.index: max(0, c.used_mib - before(c.index)) for c in checked.gpus}
