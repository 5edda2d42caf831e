"""Parking's profile options (groundwork for the parking issue): each engine's own flag, environment and
endpoints, and the settings refused at validation with the engine issues that make them unsafe."""

from __future__ import annotations

from pathlib import Path

from daemon.core.profiles import ParkMode
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.engines.engine_types import ParkCalls, ParkStep

BASE = 'engine = "{engine}"\nmodel = "/m"\nport = {port}\ntensor_parallel_size = 1\ngpus = [0]\n'
SPEC = '\n[speculative]\ndraft_model = "/d"\nnum_speculative_tokens = 3\n'


def _load(tmp_path: Path, **files: str) -> tuple[dict[str, object], dict[str, str]]:
    for i, (name, text) in enumerate(files.items()):
        (tmp_path / f"{name}.toml").write_text(text.replace("{port}", str(9000 + i)))
    result = load_checked_profiles(tmp_path)
    return dict(result.valid), {bad.name: str(bad) for bad in result.invalid}


def test_each_engine_parks_its_own_way(tmp_path: Path) -> None:
    valid, invalid = _load(
        tmp_path,
        v=BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\n',
        v2=BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\npark_level = 2\n',
        s=BASE.format(engine="sglang", port="{port}") + 'park = "release"\n',
        plain=BASE.format(engine="vllm", port="{port}"),
    )
    assert invalid == {}
    v, v2, s, plain = (valid[n].profile for n in ("v", "v2", "s", "plain"))  # type: ignore[attr-defined]
    assert (v.park, v.park_level, v.park_residual_mib) == (ParkMode.SLEEP, 1, 6144)
    assert "--enable-sleep-mode" in engine_for(v).argv(v)
    assert engine_for(v).environment(v)["VLLM_SERVER_DEV_MODE"] == "1"
    assert engine_for(v).park_calls(v) == ParkCalls(
        "/sleep?level=1", (ParkStep("/wake_up"),), "/is_sleeping", "/reset_prefix_cache"
    )
    # Level 2 drops the weights: the documented wake reloads them between the two halves (vllm#29341).
    level2 = engine_for(v2).park_calls(v2)
    assert level2 is not None
    assert level2.sleep == "/sleep?level=2"
    assert [(st.path, st.body, st.stage) for st in level2.wake] == [
        ("/wake_up?tags=weights", None, "wake"),
        ("/collective_rpc", {"method": "reload_weights"}, "reload"),
        ("/wake_up?tags=kv_cache", None, "wake"),
    ]
    # SGLang's resume restores the weights only from a CPU backup (sglang#6367): both flags rendered.
    argv = engine_for(s).argv(s)
    assert argv[-2:] == ["--enable-memory-saver", "--enable-weights-cpu-backup"], argv
    calls = ParkCalls(
        "/release_memory_occupation",
        (ParkStep("/resume_memory_occupation"),),
        reset_prefix_cache="/flush_cache",
    )
    assert engine_for(s).park_calls(s) == calls
    # Without park: none of it (the dev endpoints stay closed).
    assert "--enable-sleep-mode" not in engine_for(plain).argv(plain)
    assert "VLLM_SERVER_DEV_MODE" not in engine_for(plain).environment(plain)
    assert engine_for(plain).park_calls(plain) is None


def test_unsafe_or_impossible_parking_is_refused_with_the_reason(tmp_path: Path) -> None:
    _, invalid = _load(
        tmp_path,
        spec2=BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\npark_level = 2\n' + SPEC,
        wrong=BASE.format(engine="sglang", port="{port}") + 'park = "sleep"\n',
        exposed=BASE.format(engine="vllm", port="{port}") + 'host = "0.0.0.0"\npark = "sleep"\n',
        custom='engine = "custom"\nmodel = "/m"\nport = {port}\ntensor_parallel_size = 1\ngpus = [0]\n'
        'command = ["x"]\nhealth_path = "/h"\npark = "sleep"\n',
    )
    assert "vllm-project/vllm#55013" in invalid["spec2"]
    assert "#52479" in invalid["spec2"]
    assert "key 'park': engine 'sglang' supports park = 'release', not 'sleep'" in invalid["wrong"]
    assert "key 'park_expose_ok'" in invalid["exposed"]
    assert "supports no parking" in invalid["custom"]


def test_an_operator_may_expose_the_endpoints_knowingly(tmp_path: Path) -> None:
    text = (
        BASE.format(engine="vllm", port="{port}")
        + 'host = "0.0.0.0"\npark = "sleep"\npark_expose_ok = true\n'
    )
    valid, invalid = _load(tmp_path, exposed=text)
    assert invalid == {}
    assert "exposed" in valid


def test_a_command_that_parks_must_carry_the_engine_s_park_flags(tmp_path: Path) -> None:
    """A `command` is run verbatim: k25-ctl cannot add the flags, so a command without them is refused with
    the reason (a release without the CPU backup serves garbage after the resume)."""
    sglang = BASE.format(engine="sglang", port="{port}") + 'park = "release"\n'
    vllm = BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\n'
    valid, invalid = _load(
        tmp_path,
        nobackup=sglang + 'command = ["python3", "-m", "sglang.launch_server", "--enable-memory-saver"]\n',
        both=sglang + 'command = ["python3", "-m", "sglang.launch_server", "--enable-memory-saver", '
        '"--enable-weights-cpu-backup"]\n',
        nosleep=vllm + 'command = ["vllm", "serve", "/m"]\n',
        unparked=BASE.format(engine="sglang", port="{port}") + 'command = ["python3", "-m", "x"]\n',
    )
    assert set(invalid) == {"nobackup", "nosleep"}, invalid
    why = invalid["nobackup"]
    assert (
        "key 'command': it parks (park = 'release') but its command lacks --enable-weights-cpu-backup" in why
    )
    assert "sgl-project/sglang#6367, #19442" in why
    assert "PR #10873" in why
    assert "--enable-memory-saver" not in why.split("lacks", 1)[1].split(":", 1)[0]
    assert "lacks --enable-sleep-mode" in invalid["nosleep"]
    assert {"both", "unparked"} <= set(valid)


def test_a_command_that_wraps_the_engine_in_a_shell_carries_its_flags_inside(tmp_path: Path) -> None:
    """Issue 49: `/bin/sh -c "... exec vllm serve ... --enable-sleep-mode"` (a venv sourced first) carries
    the flag in its -c string; it was refused. Inside a shell's string the flag is found (shlex), also as
    `--flag=value`; still missing, the message says where it was searched."""
    vllm = BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\n'
    sglang = BASE.format(engine="sglang", port="{port}") + 'park = "release"\n'
    wrapped = '"/bin/sh", "-c", ". /opt/venv/bin/activate && ulimit -n 65536 && exec vllm serve /m {flags}"'
    valid, invalid = _load(
        tmp_path,
        shell=vllm + f"command = [{wrapped.format(flags='--enable-sleep-mode --port {port}')}]\n",
        bash=sglang + 'command = ["bash", "-c", "exec python3 -m sglang.launch_server '
        '--enable-memory-saver --enable-weights-cpu-backup=true"]\n',
        noflag=vllm + f"command = [{wrapped.format(flags='--enable-sleeping')}]\n",
        quoted=vllm + 'command = ["/bin/sh", "-c", "exec vllm serve \'/m --enable-sleep-mode\'"]\n',
    )
    assert {"shell", "bash"} <= set(valid), invalid
    assert set(invalid) == {"noflag", "quoted"}, invalid
    assert (
        "lacks --enable-sleep-mode (searched its argv and its shell's -c string for it)" in invalid["noflag"]
    )
    assert "lacks --enable-sleep-mode" in invalid["quoted"]  # one quoted word: the engine sees no flag


def test_a_level_1_park_pins_by_registered_pages_and_refuses_expandable_segments(tmp_path: Path) -> None:
    """Issue 51: a vLLM profile that parks at level 1 runs with torch's registered pinning
    (pinned_use_cuda_host_register, pinned_num_register_threads from the settings), merged into the
    allocator settings the profile gives; level 2, SGLang and a profile that does not park pin nothing;
    expandable_segments:True beside sleep mode is refused with the reason."""
    vllm = BASE.format(engine="vllm", port="{port}") + 'park = "sleep"\n'
    valid, invalid = _load(
        tmp_path,
        v=vllm,
        mine=vllm
        + '[environment]\nPYTORCH_CUDA_ALLOC_CONF = "max_split_size_mb:512,pinned_num_register_threads:4"\n',
        newer=vllm + '[environment]\nPYTORCH_ALLOC_CONF = "roundup_power2_divisions:4"\n',
        v2=vllm + "park_level = 2\n",
        s=BASE.format(engine="sglang", port="{port}") + 'park = "release"\n',
        plain=BASE.format(engine="vllm", port="{port}"),
        grows=vllm + '[environment]\nPYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"\n',
        grows2=vllm
        + '[environment]\nPYTORCH_ALLOC_CONF = "garbage_collection_threshold:0.6,expandable_segments:true"\n',
    )
    assert set(invalid) == {"grows", "grows2"}, invalid
    assert (
        "key 'environment': expandable_segments:True in PYTORCH_CUDA_ALLOC_CONF beside sleep mode"
        in invalid["grows"]
    )
    assert "pytorch/pytorch#147851" in invalid["grows2"]
    p = {n: valid[n].profile for n in valid}  # type: ignore[attr-defined]
    env = {n: engine_for(q).environment(q, pin_threads=16) for n, q in p.items()}
    assert (
        env["v"]["PYTORCH_CUDA_ALLOC_CONF"]
        == "pinned_use_cuda_host_register:True,pinned_num_register_threads:16"
    )
    assert env["mine"]["PYTORCH_CUDA_ALLOC_CONF"] == (
        "max_split_size_mb:512,pinned_num_register_threads:4,pinned_use_cuda_host_register:True"
    )  # the profile's own keys win
    assert env["newer"]["PYTORCH_ALLOC_CONF"].endswith("pinned_num_register_threads:16")
    assert "PYTORCH_CUDA_ALLOC_CONF" not in env["newer"]
    for name in ("v2", "s", "plain"):
        assert not any("ALLOC_CONF" in k for k in env[name]), (name, env[name])


def test_the_pin_threads_setting_is_a_power_of_two() -> None:
    import pytest
    from pydantic import ValidationError

    from daemon.core.settings import Settings

    assert Settings(park_pin_threads=16).park_pin_threads == 16
    for bad in (6, 0, 256):
        with pytest.raises(ValidationError):
            Settings(park_pin_threads=bad)
