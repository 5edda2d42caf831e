"""Parking's guards as pure functions: each says no with the figures an operator needs, and yes exactly
where the engine would start (vLLM's own check: gpu_memory_utilization x total must be free)."""

from __future__ import annotations

import pytest

from daemon.core.profiles import Profile
from daemon.engines import engine_for
from daemon.host.gpu import GpuInfo
from daemon.parking import guards as g

TOTAL = 143_771
GIB = 1024**3


def _profile(name: str, port: int, **kw: object) -> Profile:
    return Profile.model_validate({"name": name, "engine": "vllm", "model": "/m", "port": port, **kw})


def _gpus(*indices: int) -> list[GpuInfo]:
    return [GpuInfo(i, "H200", f"GPU-{i}", TOTAL, 600, ()) for i in indices]


def test_the_target_must_fit_beside_the_parked_residual() -> None:
    target = _profile("t", 9001)
    fraction = engine_for(target).memory_fraction(target)
    assert fraction == 0.9  # vLLM's default gpu_memory_utilization
    idle = {i: 600 for i in range(8)}
    assert g.fit_problem(target, fraction, _gpus(*range(8)), idle, {i: 6144 for i in range(8)}) is None
    # 0.9 x 143771 = 129394 MiB needed; beside 14000 MiB held only 129171 are free.
    why = g.fit_problem(target, fraction, _gpus(*range(8)), idle, {3: 14_000})
    assert why == (
        "t needs 129394 MiB on GPU 3 (0.9 x 143771 MiB) but only 129171 MiB would be free beside the parked "
        "engine (14000 MiB held, 600 MiB idle)"
    )
    # A GPU the target does not use, or an engine that sizes itself from what is free, is never a problem.
    on_one = _profile("one", 9002, gpus=[0], tensor_parallel_size=1)
    assert g.fit_problem(on_one, 0.9, _gpus(*range(8)), idle, {3: 100_000}) is None
    sglang = Profile.model_validate({"name": "s", "engine": "sglang", "model": "/m", "port": 9003})
    assert engine_for(sglang).memory_fraction(sglang) is None
    assert g.fit_problem(sglang, None, _gpus(0), idle, {0: 100_000}) is None


def test_host_ram_must_hold_the_pinned_weights_and_the_reserve() -> None:
    assert g.ram_problem(550 * GIB, 1000 * GIB, 64 * GIB) is None
    why = g.ram_problem(550 * GIB, 600 * GIB, 64 * GIB)
    assert why == (
        "the weights (550.0 GiB) would be pinned in host RAM, but MemAvailable is 600.0 GiB and "
        "park_ram_reserve_bytes keeps 64.0 GiB free: room for 536.0 GiB"
    )
    assert g.ram_problem(1, 10, 64 * GIB) is not None  # less available than the reserve: no room at all


def test_a_sleeping_server_keeps_its_port_and_max_parked_counts() -> None:
    parked = _profile("p", 9000)
    assert g.port_problem(_profile("t", 9001), parked) is None
    assert (
        g.port_problem(_profile("t", 9000), parked)
        == "t needs port 9000, which the sleeping server of p holds"
    )
    assert g.max_parked_problem([], 1) is None
    assert g.max_parked_problem(["p"], 1) == "max_parked = 1 and p is parked already"
    assert g.max_parked_problem([], 0) == "max_parked = 0: parking is off on this host"
    assert g.max_parked_problem(["p", "q", "r"], None) is None  # no cap: the RAM budget limits


def test_a_park_beyond_the_budget_stops_the_least_recently_parked_first() -> None:
    a, b, c = g.Pinned("a", 30.0, 40), g.Pinned("b", 10.0, 40), g.Pinned("c", 20.0, 0)
    assert g.evictions([a, b, c], 20, 100) == []  # 80 + 20 fits
    assert g.evictions([a, b, c], 40, 100) == [b]  # b was parked first; c pins nothing
    assert g.evictions([a, b, c], 100, 100) == [b, a]
    assert g.evictions([], 100, 100) == []
    with pytest.raises(g.NoRoom, match=r"would be pinned in host RAM, but park_ram_budget_bytes is 0\.0 MiB"):
        g.evictions([a], 1, 0)  # a budget too small for any park: refused, nothing evicted


def test_only_a_level_one_park_pins_weights() -> None:
    v1 = _profile("v", 9000, park="sleep")
    v2 = _profile("v", 9000, park="sleep", park_level=2)
    s = Profile.model_validate({"name": "s", "engine": "sglang", "model": "/m", "port": 1, "park": "release"})
    assert engine_for(v1).park_pins_weights(v1)
    assert not engine_for(v2).park_pins_weights(v2)
    assert engine_for(s).park_pins_weights(s)
    assert not engine_for(_profile("n", 9000)).park_pins_weights(_profile("n", 9000))


def test_a_park_that_would_pass_the_reserve_stops_the_least_recently_used_first() -> None:
    """Issue 51: MemAvailable must stay at the reserve or above after a park pins its weights. Parked
    engines are stopped for it, least recently used first (what each frees: its RAM as the ledger read
    it); where even stopping all of them would not make room, none is stopped and the park is refused."""
    a = g.Pinned("a", since=1.0, ram_bytes=30)
    b = g.Pinned("b", since=0.5, ram_bytes=20)
    c = g.Pinned("c", since=2.0, ram_bytes=0)
    # 100 available, reserve 50: room for 50; a park of 40 fits as it is.
    assert g.evictions_for_reserve([a, b, c], [], 40, 100, 50) == []
    assert g.evictions_for_reserve([a, b, c], [], 60, 100, 50) == [b]  # b the least recently used
    assert g.evictions_for_reserve([a, b, c], [], 90, 100, 50) == [b, a]
    assert g.evictions_for_reserve([a, b, c], [b], 75, 100, 50) == [a]  # b is stopped for the budget already
    assert g.evictions_for_reserve([a, b, c], [], 101, 100, 50) == []  # all of them would not do: refused


async def test_the_budget_plan_keeps_the_reserve_with_the_ledgers_figures() -> None:
    from daemon.core.hoststate import ParkedInfo
    from daemon.core.profiles import ParkMode, Profile
    from daemon.parking.budget import RamBudget

    p = Profile(name="p", engine="vllm", model="/m", port=9000, park=ParkMode.SLEEP)
    parked = [
        ParkedInfo("old", "u1", 1.0, 1, 11, {}, 10 * GIB, 1),
        ParkedInfo("new", "u2", 2.0, 1, 12, {}, 10 * GIB, 2),
    ]
    ledger = {"old": 14 * GIB, "new": 10 * GIB}  # the old one kept more than its weights
    budget = RamBudget(budget_bytes=100 * GIB, weight_bytes=lambda _: 12 * GIB, mem_available=lambda: 70 * GIB,
                       reserve_bytes=64 * GIB, held=lambda: ledger)  # fmt: skip
    plan = await budget.plan(p, parked)
    assert ([e.profile for e in plan.evict], plan.bound) == (["old"], "reserve")  # 70 + 14 - 64 >= 12
    assert "MemAvailable would fall under park_ram_reserve_bytes (64.0 GiB)" in budget.reason(p, plan)
    tight = RamBudget(budget_bytes=100 * GIB, weight_bytes=lambda _: 50 * GIB, mem_available=lambda: 70 * GIB,
                      reserve_bytes=64 * GIB, held=lambda: ledger)  # fmt: skip
    with pytest.raises(g.NoRoom, match="MemAvailable"):
        await tight.plan(p, parked)  # 70 + 24 - 64 < 50: refused, nothing stopped


async def test_the_budget_counts_pinned_weights_not_all_an_engine_holds() -> None:
    """The budget (park_ram_budget_bytes) is for pinned weights: a parked engine's whole process tree (the
    ledger's figure, here 50 MiB beside its 1 MiB of weights) does not count against it. CI caught the
    ledger's figure used there: a second park evicted the first in a 2.5 MiB budget."""
    from daemon.core.hoststate import ParkedInfo
    from daemon.core.profiles import ParkMode, Profile
    from daemon.parking.budget import RamBudget

    mib = 2**20
    p = Profile(name="pb", engine="vllm", model="/m", port=9000, park=ParkMode.SLEEP)
    parked = [ParkedInfo("pa", "u1", 1.0, 1, 11, {}, mib, 1)]
    budget = RamBudget(budget_bytes=int(2.5 * mib), weight_bytes=lambda _: mib, mem_available=lambda: 64 * GIB,
                       reserve_bytes=0, held=lambda: {"pa": 50 * mib})  # fmt: skip
    plan = await budget.plan(p, parked)
    assert (plan.evict, plan.ram_bytes) == ((), mib)
