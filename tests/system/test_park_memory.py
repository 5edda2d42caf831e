"""Issue 51: parking under a real memory limit. The sandbox's daemon reads MemAvailable from the sandbox's
own memory cgroup (memory_cgroup), whose limit the test sets; the fake engines really allocate the pinned
backup (128 MiB each, the size of their weight files). A park that would leave less than the reserve
stops the least recently used parked engine first, or stops instead of parking; a thread reading the
cgroup every few milliseconds shows MemAvailable never fell below the reserve. A woken engine that kept
its backup is in the RAM ledger."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.core.errors import K25Error
from daemon.host.memory import FILE_PAGES, CgroupAvailable
from k25_sandbox import sandbox as sbx
from k25_sandbox.cgroups import memory_dir
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.parking_host import MIB, details, parked_profiles, switch
from tests.sandboxing import Api

RESERVE = 256 * MIB
PIN_MIB = 128


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    extra, models = tmp_path_factory.mktemp("mem-profiles"), tmp_path_factory.mktemp("mem-models")
    make_models(models)
    for name in ("ra", "rb"):
        weights = models / f"weights-{name}"
        weights.mkdir()
        (weights / "model-00001-of-00001.safetensors").write_bytes(b"\1" * PIN_MIB * MIB)
        text = fake_engine_profile(name, flavor="vllm", port=free_port(), models=models, load_seconds=0.5,
                                   park="sleep", weights=weights,
                                   engine_args=("--pin-mib", str(PIN_MIB), "--pin-gbps", "100"))  # fmt: skip
        (extra / f"{name}.toml").write_text(text)
    settings = {"park_ram_reserve_bytes": str(RESERVE)}
    try:
        info = sbx.up(
            profiles=extra, load_seconds=0.5, binds=(models,), settings=settings, memory_cgroup=True
        )
    except K25Error as e:
        pytest.skip(str(e))  # no memory cgroup to limit on this machine
    try:
        yield Api(info)
    finally:
        sbx.down(info)


def _cgroup(api: Api) -> Path:
    d = memory_dir(api.info.cgroups)
    assert d is not None
    return d


def _limit(api: Api, available: int) -> None:
    """Limit the sandbox so that MemAvailable (as the daemon reads it) is `available` now."""
    d = _cgroup(api)
    v2 = (d / "memory.max").exists()
    usage = int((d / ("memory.current" if v2 else "memory.usage_in_bytes")).read_text())
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    held = usage - sum(int(stat[k]) for k in FILE_PAGES["v2" if v2 else "v1"])
    (d / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(held + available))


class Lowest:
    """The lowest MemAvailable a thread reading the cgroup every 2 ms saw while the block ran."""

    def __init__(self, read: Callable[[], int]) -> None:
        self.read, self.low, self.stop = read, read(), threading.Event()

    def __enter__(self) -> Lowest:
        def watch() -> None:
            while not self.stop.wait(0.002):
                self.low = min(self.low, self.read())

        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _held(api: Api, name: str) -> Any:
    return next((h for h in api.status()["ram_held"] if h["profile"] == name), None)


def test_a_woken_engine_keeps_its_backup_in_the_ledger(host: Api) -> None:
    switch(host, "ra")
    switch(host, "vllm-eagle3")  # ra parks: its 128 MiB backup pinned
    assert set(parked_profiles(host)) == {"ra"}
    switch(host, "ra")  # the wake: the block stays in the process
    held = host.wait_until(
        lambda: (h := _held(host, "ra")) and not h["parked"] and h["bytes"] >= PIN_MIB * MIB and h,
        what="the ledger reads the woken ra with its backup",
    )
    assert held["bytes"] >= PIN_MIB * MIB, held


def test_a_park_past_the_reserve_stops_the_least_recently_used_first(host: Api) -> None:
    switch(host, "ra")
    switch(host, "vllm-eagle3")  # ra parked (the block it kept: no new pinning)
    switch(host, "rb")
    host.wait_until(lambda: _held(host, "ra") and _held(host, "rb"), what="the ledger reads ra and rb")
    # rb's park needs 128 MiB + the reserve; 96 MiB over the reserve is left: ra must go first.
    _limit(host, RESERVE + 96 * MIB)
    with Lowest(CgroupAvailable(_cgroup(host))) as seen:
        run = switch(host, "vllm-eagle3")
    assert set(parked_profiles(host)) == {"rb"}
    why = "stopping parked ra: least recently used: parking rb pins"
    stops = details(run, "stop")
    assert any(d.startswith(why) and "park_ram_reserve_bytes" in d for d in stops), details(run)
    assert seen.low >= RESERVE, (seen.low / MIB, RESERVE / MIB)
    print(f"evict first: MemAvailable at least {seen.low / MIB:.0f} MiB (reserve {RESERVE / MIB:.0f} MiB)")


def test_a_park_that_cannot_fit_stops_the_engine_instead(host: Api) -> None:
    for name in parked_profiles(host):
        assert host.client.post(f"/profiles/{name}/unpark").status_code == 200
    switch(host, "ra")
    _limit(host, RESERVE + 64 * MIB)  # nothing parked to stop, and 128 MiB would not fit
    with Lowest(CgroupAvailable(_cgroup(host))) as seen:
        run = switch(host, "vllm-eagle3")
    assert parked_profiles(host) == {}
    said = details(run, "parking")
    assert any(d.startswith("not parked: the weights (0.1 GiB) would be pinned") for d in said), said
    assert seen.low >= RESERVE, (seen.low / MIB, RESERVE / MIB)
    print(f"stop instead: MemAvailable at least {seen.low / MIB:.0f} MiB (reserve {RESERVE / MIB:.0f} MiB)")
