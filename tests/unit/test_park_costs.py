"""The park cost model (issue 51), pure: pinning per process up to the host's ceiling, copies per GPU, a
level-2 wake from the page cache or the disk; the stored rates (measured, or the defaults, said so); the
engine's interpreter found from its argv; the measurement run through a stand-in interpreter; `k25-ctl
host` with a parking profile; and the manual's cost table for the seed's host, held to the model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import pytest

from daemon.core.errors import K25Error
from daemon.host.calibration import RATE_KEYS, interpreter_of, measure
from daemon.parking import costs, rates
from daemon.parking.costs import DEFAULT_RATES, GIB, Shape
from daemon.parking.forecast import outside, said
from tests.conftest import ROOT

K25 = str(Path(sys.executable).parent / "k25-ctl")
SEED = Shape(547 * 10**9, workers=8, gpus=8)


def test_pinning_is_per_process_up_to_the_hosts_ceiling() -> None:
    r = DEFAULT_RATES
    assert r.pin(1, registered=False) == pytest.approx(1.8)
    assert r.pin(4, registered=False) == pytest.approx(7.2)  # 4 x 1.8, under the ceiling
    assert r.pin(8, registered=False) == pytest.approx(10.3)  # the ceiling
    assert r.pin(8, registered=True) == pytest.approx(14.4)
    one = Shape(8 * GIB, workers=1, gpus=1)
    first = costs.level1_first(one, r, registered=False)
    assert first.park_s == pytest.approx(8 / 1.8 + 8 / 51.0)
    assert first.wake_s == pytest.approx(8 / 46.6)
    again = costs.level1_again(one, r)
    assert again.park_s == pytest.approx(8 / 51.0)  # the block kept: the copy alone
    assert again.ram_bytes == first.ram_bytes == 8 * GIB


def test_a_level_2_wake_reloads_from_the_page_cache_or_the_disk() -> None:
    hot = costs.level2(SEED, DEFAULT_RATES, resident=1.0)
    cold = costs.level2(SEED, DEFAULT_RATES, resident=0.0)
    half = costs.level2(SEED, DEFAULT_RATES, resident=0.5)
    assert (hot.park_s, hot.ram_bytes) == (0.0, 0)
    assert hot.wake_s == pytest.approx(547e9 / GIB / 8 / 6.6)  # per GPU, in parallel
    assert cold.wake_s == pytest.approx(547e9 / GIB / 1.5)  # the disk's rate for all of it
    assert half.wake_s == pytest.approx((hot.wake_s + cold.wake_s) / 2)


def test_the_seed_hosts_table_in_the_manual_is_the_models() -> None:
    rows = [*costs.ways(SEED, DEFAULT_RATES, resident=1.0), costs.level2(SEED, DEFAULT_RATES, resident=0.0)]
    page = (ROOT / "docs" / "parking.md").read_text()
    for w in rows:
        line = f"| {w.name} | {w.park_s:.1f} | {w.wake_s:.1f} | {w.ram_bytes / 1e9:.0f} GB |"
        assert line in page, line
    registered, default = rows[1].park_s, rows[0].park_s
    assert 35 < registered < default < 55  # "roughly 35-50 s" (issue 51)


CALIBRATED = {  # `host calibrate` on the H200 machine, 2026-12-04 (tests/gpu/test_park_cost_gpu.py's run)
    "pin_process": 1.29, "pin_host": 4.7, "pin_process_registered": 5.45, "pin_host_registered": 9.43,
    "device_to_host": 51.38, "host_to_device": 51.4, "page_cache": 7.38, "disk": 1.41,
}  # fmt: skip


def test_the_seed_hosts_table_from_the_calibrated_rates_is_the_models() -> None:
    r = costs.HostRates.of(CALIBRATED)
    rows = [*costs.ways(SEED, r, resident=1.0), costs.level2(SEED, r, resident=0.0)]
    page = (ROOT / "docs" / "parking.md").read_text()
    for w in rows:
        line = f"| {w.name} | {w.park_s:.1f} | {w.wake_s:.1f} | {w.ram_bytes / 1e9:.0f} GB |"
        assert line in page, line


def test_rates_are_stored_with_their_time_and_the_defaults_say_so(tmp_path: Path) -> None:
    assert rates.load(tmp_path) is DEFAULT_RATES
    assert DEFAULT_RATES.measured_at is None
    measured = {k: float(i + 1) for i, k in enumerate(RATE_KEYS)}
    at = datetime(2026, 12, 4, 17, 0, tzinfo=UTC)
    spread = {"pin_process": (0.5, 1.5)}
    saved = rates.save(tmp_path, measured, python="/opt/vllm/bin/python", ranges=spread, now=at)
    again = rates.load(tmp_path)
    assert again == saved
    assert again.ranges == spread
    assert (again.pin_process, again.disk, again.measured_at) == (1.0, 8.0, at)
    assert json.loads((tmp_path / rates.FILE).read_text())["python"] == "/opt/vllm/bin/python"
    (tmp_path / rates.FILE).write_text("{not json")
    assert rates.load(tmp_path) is DEFAULT_RATES  # unreadable: the defaults, never a crash


def test_the_engines_interpreter_is_found_from_its_argv(tmp_path: Path) -> None:
    venv_python = tmp_path / "venv/bin/python3.12"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("")
    venv_python.chmod(0o755)
    script = tmp_path / "venv/bin/vllm"
    script.write_text(f"#!{venv_python}\nimport sys\n")
    via_env = tmp_path / "sglang-launch"
    via_env.write_text("#!/usr/bin/env python3\n")
    shell = tmp_path / "run.sh"
    shell.write_text("#!/bin/sh\nexec vllm serve\n")
    assert interpreter_of([str(script), "serve", "/m"]) == str(venv_python)
    assert interpreter_of([str(venv_python), "-m", "sglang.launch_server"]) == str(venv_python)
    assert interpreter_of([str(via_env)]) is not None  # env python3: the PATH's
    assert interpreter_of([str(shell)]) is None  # a shell wrapper: --python says which
    assert interpreter_of([]) is None


def test_the_measurement_runs_with_the_given_interpreter(tmp_path: Path) -> None:
    """A stand-in interpreter that answers as the script would: its JSON is read; a failing one is said
    with its output; a missing one names --python."""
    fake = tmp_path / "python-fake"
    ranges = {k: [1.5, 2.5] for k in RATE_KEYS}
    line = json.dumps({k: 2.0 for k in RATE_KEYS} | {"gib": 1, "ranges": ranges})
    fake.write_text(f"#!/bin/sh\necho noise\necho '{line}'\n")
    fake.chmod(0o755)
    got = measure(str(fake), gib=1, processes=2, threads=8, file=tmp_path / "f", timeout_s=30)
    assert got.rates == {k: 2.0 for k in RATE_KEYS}
    assert got.ranges == {k: (1.5, 2.5) for k in RATE_KEYS}
    broken = tmp_path / "python-broken"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(K25Error, match="No module named torch"):
        measure(str(broken), gib=1, processes=2, threads=8, file=tmp_path / "f", timeout_s=30)
    with pytest.raises(K25Error, match="--python"):
        measure(str(tmp_path / "nope"), gib=1, processes=2, threads=8, file=tmp_path / "f", timeout_s=30)


def test_k25_ctl_host_shows_each_way_for_a_parking_profile(tmp_path: Path) -> None:
    weights = tmp_path / "m"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\0" * (4 * 2**20))
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "parky.toml").write_text(
        f'engine = "vllm"\nmodel = "{weights}"\nport = 9102\ntensor_parallel_size = 2\ngpus = [0, 1]\n'
        'park = "sleep"\n'
    )
    env = dict(os.environ, K25_CONFIG="/nonexistent.toml", K25_PROFILES_DIR=str(tmp_path / "profiles"),
               K25_STATE_DIR=str(tmp_path / "state"))  # fmt: skip
    out = subprocess.run([K25, "host"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "defaults (k25-ctl host calibrate" in out.stdout
    assert re.search(r"parky: 0\.0 GB of weights, \d+% resident, 2 workers on 2 GPUs", out.stdout), out.stdout
    for way in ("level 1, first park (registered pinning)", "level 1, later park", "level 2, reload"):
        assert way in out.stdout
    data = json.loads(subprocess.run([K25, "host", "--json"], env=env, capture_output=True, text=True,
                                     timeout=60).stdout)  # fmt: skip
    assert next(w["name"] for w in data["profiles"]["parky"]) == "level 1, first park (default pinning)"
    missing = subprocess.run([K25, "host", "calibrate"], env=env, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert "--python PATH" in missing.stderr


def test_the_forecast_knows_a_process_that_pinned_before() -> None:
    """A process's first level-1 park pins (registered for vLLM, whose environment k25-ctl renders; not
    for SGLang's backup), its later parks copy only (the block kept), a new process pins afresh; level 2
    reloads from the page cache as far as the weights are resident."""
    from daemon.core.profiles import ParkMode, Profile
    from daemon.parking.forecast import ParkForecast, said

    def profile(engine: str, park: ParkMode, level: Literal[1, 2] = 1) -> Profile:
        return Profile(name="p", engine=engine, model="/m", port=9000, tensor_parallel_size=8,  # type: ignore[arg-type]
                       gpus=list(range(8)), park=park, park_level=level)  # fmt: skip

    forecast = ParkForecast(rates=lambda: DEFAULT_RATES, weights=lambda p: (547 * 10**9, 1.0))
    vllm = profile("vllm", ParkMode.SLEEP)
    assert forecast.way(vllm, 101).name == "level 1, first park (registered pinning)"
    forecast.parked(101)
    assert forecast.way(vllm, 101).name == "level 1, later park"
    assert forecast.way(vllm, 202).name == "level 1, first park (registered pinning)"  # another process
    forecast.gone(101)
    assert forecast.way(vllm, 101).name == "level 1, first park (registered pinning)"
    assert (
        forecast.way(profile("sglang", ParkMode.RELEASE), 303).name == "level 1, first park (default pinning)"
    )
    two = forecast.way(profile("vllm", ParkMode.SLEEP, level=2), 404)
    assert (two.name, two.ram_bytes) == ("level 2, reload from page cache", 0)
    assert said(9.62, two, wake=True) == "in 9.6s (predicted 9.6s: level 2, reload from page cache)"


def test_auto_chooses_a_level_and_says_why() -> None:
    """Issue 51's park_level = "auto", pure: level 2 for weights a parked profile shares in the page cache
    or when level 1 would not fit, level 1 for a fast wake otherwise, always level 1 with a drafter."""
    from daemon.core.profiles import ParkMode, Profile, SpeculativeConfig
    from daemon.parking.levels import at_level, choose, describe

    p = Profile(name="p", engine="vllm", model="/m", port=9000, park=ParkMode.SLEEP, park_level="auto")
    shape = Shape(547 * 10**9, workers=8, gpus=8)
    ways = {
        1: costs.level1_first(shape, DEFAULT_RATES, registered=True),
        2: costs.level2(shape, DEFAULT_RATES, resident=1.0),
    }
    assert choose(p, no_room=None, shared_with=None, ways=ways).level == 1
    shared = choose(p, no_room=None, shared_with="baseline", ways=ways)
    assert (shared.level, shared.why) == (
        2,
        "its weights are resident in the page cache and shared with parked baseline: a 9.6s reload pins nothing",
    )
    assert (
        choose(p, no_room="547.0 GB do not fit", shared_with=None, ways=ways).why
        == "level 1 would not fit: 547.0 GB do not fit"
    )
    spec = p.model_copy(update={"speculative": SpeculativeConfig(draft_model="/d", num_speculative_tokens=3)})
    assert choose(spec, no_room="no", shared_with="baseline", ways=ways).level == 1
    assert at_level(p, 2).park_level == 2
    text = describe(shared, ways)
    assert text.startswith("park_level auto: level 2, its weights are resident")
    assert (
        "level 1: park 36.6s, wake 1.4s, 547.0 GB pinned; level 2: park 0.0s, wake 9.6s, 0.0 GB pinned"
        in text
    )


def test_a_calibration_that_swings_predicts_a_range_and_a_park_outside_it_is_said() -> None:
    """One process's default pinning read 1.08, 1.83 and 1.60 GiB/s in three runs on one H100 host: the
    median predicts, the lowest and highest bound the prediction, and a park outside them is said."""
    swinging = CALIBRATED | {"pin_process": 1.60}
    r = costs.HostRates.of(swinging, ranges={"pin_process": (1.08, 1.83)})
    shape = costs.Shape(int(6 * costs.GIB), workers=1, gpus=1)
    way = costs.spread(lambda rates: costs.level1_first(shape, rates, registered=False), r)
    low, high = way.range_of(wake=False)
    copy = 6 / CALIBRATED["device_to_host"]
    assert low == pytest.approx(6 / 1.83 + copy)
    assert high == pytest.approx(6 / 1.08 + copy)
    assert low < way.park_s < high
    assert way.range_of(wake=True) == (way.wake_s, way.wake_s)  # the copies' rates did not swing
    assert "outside" not in said(4.5, way, wake=False)
    assert "[3.4, 5.7]" in said(4.5, way, wake=False)
    slow = said(6.9, way, wake=False)  # measured / predicted 1.38 on the H100
    assert "outside the range the calibrated rates imply" in slow
    assert outside(2.5, way, wake=False)
    unranged = costs.level1_first(shape, costs.HostRates.of(swinging), registered=False)
    assert not outside(99.0, unranged, wake=False)  # one reading: nothing to say it moved
