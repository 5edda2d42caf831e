"""The fake engine parks as the real ones do (groundwork for the parking issue): the flavour's endpoints,
its GPU memory given back (the workers unmap the fake device files, so the simulated GPU frees it) and
taken again on wake, requests refused while asleep, and the faults the engines' trackers report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import httpx
import psutil

from daemon.core.hoststate import StateHub
from daemon.engines.checks import load_checked_profiles
from daemon.host.memory import PsutilMemory
from daemon.host.systemd import UnitState
from daemon.parking.ledger import RamLedger
from tests.fake_engines import Engine, Start
from tests.waiting import eventually_sync


def test_vllm_sleeps_gives_its_gpu_memory_back_and_wakes(start: Start) -> None:
    engine = start("vllm")
    assert engine.mapped()
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": False}
    assert httpx.post(f"{engine.url}/sleep", params={"level": 1}).status_code == 200
    assert httpx.get(f"{engine.url}/is_sleeping").json() == {"is_sleeping": True}
    eventually_sync(lambda: not engine.mapped(), what="the GPU memory given back", within_s=10, every_s=0.05)
    assert engine.complete() == 503  # asleep: no generation
    pid = engine.proc.pid
    assert httpx.post(f"{engine.url}/wake_up").status_code == 200
    eventually_sync(engine.mapped, what="the GPU memory taken again", within_s=10, every_s=0.05)
    assert engine.complete() == 200
    assert engine.proc.pid == pid  # the same process: nothing was reloaded


def test_sglang_releases_and_resumes(start: Start) -> None:
    engine = start("sglang")
    assert httpx.post(f"{engine.url}/release_memory_occupation", json={}).status_code == 200
    eventually_sync(lambda: not engine.mapped(), what="released", within_s=10, every_s=0.05)
    assert httpx.post(f"{engine.url}/resume_memory_occupation", json={}).status_code == 200
    eventually_sync(engine.mapped, what="resumed", within_s=10, every_s=0.05)


def test_the_engines_parking_faults(start: Start) -> None:
    keeps = start("vllm", "--fault", "sleep-keeps-memory")
    assert httpx.post(f"{keeps.url}/sleep", params={"level": 1}).status_code == 200  # says yes...
    assert httpx.get(f"{keeps.url}/is_sleeping").json() == {"is_sleeping": True}
    assert keeps.mapped()  # ...and holds the memory all the same
    fails = start("vllm", "--fault", "wake-fails")
    httpx.post(f"{fails.url}/sleep", params={"level": 1})
    assert httpx.post(f"{fails.url}/wake_up").status_code == 500


def test_the_answer_depends_on_the_prompt_and_a_good_wake_keeps_it(start: Start) -> None:
    engine = start("vllm")
    first = engine.answer()
    assert first == engine.answer()  # greedy: the same every time
    body = {"model": "kimi-k2.5", "prompt": "Something else entirely", "max_tokens": 8}
    other = httpx.post(f"{engine.url}/v1/completions", json=body, timeout=10).json()["choices"][0]["text"]
    assert other != first
    assert "!!" not in first
    assert engine.post("/sleep?level=1") == 200
    assert engine.post("/wake_up") == 200
    assert engine.answer() == first  # level 1 kept a copy of the weights


def test_sglang_without_the_cpu_backup_resumes_to_garbage(start: Start) -> None:
    """sglang#6367: the memory saver releases the weights; only --enable-weights-cpu-backup restores them."""
    for park, garbage in ((("--enable-memory-saver",), True), (None, False)):
        engine = start("sglang", park=park)
        before = engine.answer()
        assert engine.post("/release_memory_occupation") == 200
        assert engine.post("/resume_memory_occupation") == 200
        assert httpx.get(f"{engine.url}/health").status_code == 200  # healthy either way
        after = engine.answer()
        assert (after != before, set(after.split()) == {"!!"}) == (garbage, garbage), (park, before, after)


def test_vllm_level_2_needs_reload_weights_between_the_two_wakes(start: Start) -> None:
    plain = start("vllm")
    before = plain.answer()
    assert plain.post("/sleep?level=2") == 200
    assert plain.post("/wake_up") == 200
    assert set(plain.answer().split()) == {"!!"}  # a plain wake after level 2: garbage (vllm#29341)
    documented = start("vllm")
    assert documented.post("/sleep?level=2") == 200
    assert documented.post("/collective_rpc", method="reload_weights") == 500  # the weights still asleep
    assert documented.post("/wake_up?tags=weights") == 200
    assert documented.post("/collective_rpc", method="reload_weights") == 200
    assert documented.post("/wake_up?tags=kv_cache") == 200
    assert documented.answer() == before
    old = start("vllm", "--fault", "no-collective-rpc")
    assert old.post("/collective_rpc", method="reload_weights") == 404


def test_the_corrupting_wake_fault(start: Start) -> None:
    engine = start("vllm", "--fault", "wake-corrupts")
    before = engine.answer()
    assert engine.post("/sleep?level=1") == 200
    assert engine.post("/wake_up") == 200
    assert engine.complete() == 200
    assert engine.answer() != before


def _rss(engine: Engine) -> int:
    return int(psutil.Process(engine.proc.pid).memory_info().rss)


def test_a_first_park_pins_at_the_host_rate_and_the_block_stays(start: Start) -> None:
    """Issue 51: the fake parks with a real host's physics. Its first level-1 park pins the backup at the
    configured rate (68 GiB at 100 GB/s: ~0.73 s) into real host RAM (64 MiB here: its RSS grows); the
    woken engine keeps that block (its RSS stays up, as torch's caching allocator keeps it); a second park
    is the copy alone."""
    engine = start("vllm", "--pin-gbps", "100", "--pin-mib", "64")
    before = _rss(engine)
    first = httpx.post(f"{engine.url}/sleep", params={"level": 1}, timeout=30)
    assert first.status_code == 200
    pinned = _rss(engine)
    assert pinned - before >= 60 * 2**20, (before, pinned)
    assert first.elapsed.total_seconds() >= 0.7  # 68.1234 GiB / 100 GB/s = 0.73 s
    assert httpx.post(f"{engine.url}/wake_up").status_code == 200
    assert _rss(engine) - before >= 60 * 2**20  # the woken engine still holds its backup
    second = httpx.post(f"{engine.url}/sleep", params={"level": 1}, timeout=30)
    assert second.status_code == 200
    assert second.elapsed.total_seconds() < first.elapsed.total_seconds() / 2  # the block reused
    assert _rss(engine) - pinned < 16 * 2**20  # and no second block


class _OneUnit:
    """systemd as the ledger asks it: the active profile's unit runs with this main PID."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    async def state(self, unit: str) -> UnitState:
        return UnitState(
            unit, "loaded", "active", "running", "success", self.pid, f"/system.slice/{unit}", 0, 0
        )


async def test_the_ram_ledger_counts_the_block_a_woken_engine_kept(start: Start, tmp_path: Path) -> None:
    """Issue 51: the RAM ledger reads each engine's process tree (psutil): after a park (64 MiB pinned)
    and a wake, the serving engine still holds its backup, and the ledger says so; a change of less than a
    step is not published again."""
    engine = start("vllm", "--pin-gbps", "1000", "--pin-mib", "64")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "fake.toml").write_text(
        'engine = "vllm"\nmodel = "/m"\nport = 9300\ntensor_parallel_size = 1\ngpus = [0]\npark = "sleep"\n'
    )
    profiles = load_checked_profiles(tmp_path / "p")
    hub = StateHub()
    hub.status = replace(hub.status, active_profile="fake")  # the fake serves (as the switch would say)
    ledger = RamLedger(
        memory=PsutilMemory(), systemd=_OneUnit(engine.proc.pid), profiles=lambda: profiles, hub=hub
    )
    await ledger.sample()
    before = hub.status.ram_held
    assert [(h.profile, h.main_pid, h.parked) for h in before] == [("fake", engine.proc.pid, False)]
    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as c:
        assert (await c.post("/sleep", params={"level": 1})).status_code == 200
        assert (await c.post("/wake_up")).status_code == 200
    await ledger.sample()
    after = hub.status.ram_held
    assert after[0].bytes - before[0].bytes >= 60 * 2**20, (before, after)  # the kept block, counted
    await ledger.sample()
    assert hub.status.ram_held is after  # moved less than a step: not published again
