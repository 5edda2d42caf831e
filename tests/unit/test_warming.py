"""Residency and warming on real files (evicted, warmed, read back), the memory guard, the breakdown."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from daemon.core.profiles import Profile
from daemon.engines.load_stages import segments
from daemon.host.pagecache import PageCache, evict, resident_bytes
from daemon.warming.warmer import Warmer
from tests.waiting import eventually

MIB = 2**20


def _model(tmp_path: Path, sizes_mib: list[int]) -> tuple[Profile, list[Path]]:
    folder = tmp_path / "model"
    folder.mkdir()
    files = []
    for i, size in enumerate(sizes_mib):
        f = folder / f"model-{i}.safetensors"
        f.write_bytes(os.urandom(size * MIB))
        files.append(f)
    (folder / "config.json").write_text("{}")
    (folder / "notes.md").write_text("not a weight file")
    profile = Profile.model_validate({"name": "p", "engine": "vllm", "model": str(folder), "port": 9,
                                      "gpus": [0], "tensor_parallel_size": 1})  # fmt: skip
    for f in files:
        evict(f)
    return profile, files


def _warmer(mem: int, reserve: int = 0) -> Warmer:
    return Warmer(PageCache(), mem_available=lambda: mem, reserve=reserve, workers=2, block=1 * MIB)


async def test_residency_then_a_warm_then_residency_again(tmp_path: Path) -> None:
    profile, files = _model(tmp_path, [8, 4])
    warmer = _warmer(mem=1 << 40)
    before = await asyncio.to_thread(warmer.scan, profile)
    assert (before.files, before.bytes) == (3, 12 * MIB + 2)  # the shards and config.json, not notes.md
    assert before.resident <= 2 * 4096  # evicted (config.json may stay)
    seen: list[tuple[int, int]] = []

    async def progress(done: int, total: int) -> None:
        seen.append((done, total))

    result = await warmer.warm(profile, idle_io=True, progress=progress, stop=threading.Event())
    assert result.read == 12 * MIB
    assert not result.skipped
    assert not result.stopped
    assert result.after is not None
    assert result.after.percent == 100.0
    assert all(resident_bytes(f).resident == f.stat().st_size for f in files)
    assert seen[-1] == (12 * MIB, 12 * MIB)
    assert len(seen) >= 3
    assert warmer.latest["p"].percent == 100.0  # what GET /profiles shows
    assert "residency 0% -> 100%" in result.describe()


async def test_the_memory_guard_leaves_out_what_does_not_fit(tmp_path: Path) -> None:
    profile, files = _model(tmp_path, [6, 2])
    # 5 MiB available beyond the reserve: the 6 MiB shard does not fit, the 2 MiB one does.
    result = await _warmer(mem=105 * MIB, reserve=100 * MIB).warm(
        profile, idle_io=False, progress=lambda d, t: asyncio.sleep(0), stop=threading.Event()
    )
    assert result.read == 2 * MIB
    assert result.skipped == ["model-0.safetensors"]
    assert resident_bytes(files[0]).resident == 0  # never forced in
    assert "did not fit in memory" in result.describe()


async def test_a_stopped_warm_stops(tmp_path: Path) -> None:
    profile, _ = _model(tmp_path, [16])
    stop = threading.Event()
    stop.set()
    result = await _warmer(mem=1 << 40).warm(
        profile, idle_io=False, progress=lambda d, t: asyncio.sleep(0), stop=stop
    )
    assert result.stopped
    assert result.read == 0


def test_breakdown_segments() -> None:
    stages = {
        "warm": 3.0,
        "weights": 10.0,
        "model_load": 12.0,
        "compile": 5.0,
        "graphs": 4.0,
        "engine_init": 20.0,
    }
    got = segments(stages, 40.0)
    assert [k for k, _ in got] == ["warm", "weights", "compile", "graphs", "kv_cache_warmup", "other"]
    assert [v for _, v in got] == pytest.approx([3.0, 12.0, 5.0, 4.0, 11.0, 8.0])
    assert segments({"weights": 1.0}, None) == [("weights", 1.0)]
    assert segments({"wake": 0.8}, 0.8) == [("wake", 0.8)]  # a parked engine's wake is all its load


def test_cachestat_and_mincore_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from daemon.host import pagecache

    f = tmp_path / "w.safetensors"
    f.write_bytes(os.urandom(3 * MIB))

    def both() -> tuple[int, int]:
        fast = resident_bytes(f).resident
        with monkeypatch.context() as m:
            m.setattr(pagecache, "_cachestat_works", False)  # an older kernel: mincore
            slow = resident_bytes(f).resident
        return fast, slow

    evict(f)
    assert both() == (0, 0)
    f.read_bytes()  # all of it in (stable states only: readahead may still be adding pages otherwise)
    assert both() == (3 * MIB, 3 * MIB)


class _SlowCache:
    """A page cache whose reads go on until they are stopped (a huge checkpoint on a slow disk)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.reading = threading.Event()
        self.stopped = threading.Event()

    def files(self, roots: object) -> list[Path]:
        return [self.root / "model-0.safetensors"]

    def residency(self, path: Path) -> Any:
        from daemon.host.pagecache import FileResidency

        return FileResidency(str(path), 1 << 30, 0)

    def read_into_cache(
        self, path: Path, *, block: int, idle_io: bool, progress: Any, stop: threading.Event
    ) -> int:
        self.reading.set()
        done = 0
        while not stop.wait(0.01):  # a block at a time, until told to stop
            progress(block)
            done += block
        self.stopped.set()
        return done


async def test_a_warm_run_is_cancelled_and_its_readers_stop(tmp_path: Path) -> None:
    from daemon.core.errors import WrongState
    from daemon.core.hoststate import StateHub
    from daemon.core.profiles import LoadedProfile, ProfileSet
    from daemon.runs.jobs import Jobs
    from daemon.runs.recorder import RunRecorder
    from daemon.store.queries import Store
    from daemon.warming.service import WarmService

    profile, _ = _model(tmp_path, [1])
    cache = _SlowCache(tmp_path / "model")
    warmer = Warmer(cache, mem_available=lambda: 1 << 40, reserve=0, workers=1, block=MIB)
    recorder = RunRecorder(await asyncio.to_thread(Store.open, tmp_path / "k25.db"), StateHub())
    lp = LoadedProfile(profile=profile, file=tmp_path / "p.toml", sha256="x")
    jobs = Jobs(recorder.hub)
    profiles = ProfileSet(valid={"p": lp}, invalid=[])
    svc = WarmService(warmer, recorder, jobs, lambda: profiles, every_s=60, always_below=0.98)
    run_id = await svc.start("p")
    await asyncio.to_thread(cache.reading.wait, 10)
    jobs.cancel(run_id)
    assert await asyncio.to_thread(cache.stopped.wait, 10)  # the reader thread saw the stop

    async def ended() -> Any:  # the run's end is recorded by its task
        view = await asyncio.to_thread(recorder.store.get_run, run_id=run_id)
        return view if view is not None and view.run.outcome != "running" else None

    view = await eventually(ended, what="the warm run ends")
    assert (view.run.kind, view.run.outcome) == ("warm", "cancelled")
    assert cache.stopped.is_set()

    async def let_go() -> bool:  # the job leaves the registry once its task is over (a moment later)
        return jobs.find(run_id) is None

    await eventually(let_go, what="the job is over")
    with pytest.raises(WrongState, match="not in progress"):  # over
        jobs.cancel(run_id)
