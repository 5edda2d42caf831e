"""`k25-ctl launch` execs the engine: the unit's main PID becomes the engine process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

K25 = str(Path(sys.executable).parent / "k25-ctl")


def _env(profiles: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(K25_CONFIG="/nonexistent.toml", K25_PROFILES_DIR=str(profiles), K25_CHECK_MODEL_PATHS="false",
               K25_STATE_DIR=str(profiles / "state"))  # fmt: skip
    return env


def test_launch_execs_in_place(tmp_path: Path) -> None:
    script = "import json, os; print(json.dumps({'pid': os.getpid(), 'gpus': os.environ['CUDA_VISIBLE_DEVICES'], 'x': os.environ['X']}))"
    (tmp_path / "probe.toml").write_text(
        'engine = "custom"\nmodel = "/m"\nport = 9100\nhealth_path = "/health"\n'
        "tensor_parallel_size = 2\ngpus = [4, 5]\n"
        f"command = {json.dumps([sys.executable, '-c', script])}\n"
        '[environment]\nX = "from-profile"\n'
    )
    proc = subprocess.Popen([K25, "launch", "probe"], env=_env(tmp_path), stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    seen = json.loads(out)
    assert seen["pid"] == proc.pid  # exec, not a child
    assert seen["gpus"] == "4,5"
    assert seen["x"] == "from-profile"


def test_launch_unknown_profile_fails_clearly(tmp_path: Path) -> None:
    r = subprocess.run(
        [K25, "launch", "nope"], env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert "no profile 'nope'" in r.stderr


def test_launch_invalid_profile_names_key(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('engine = "vllm"\nmodel = "/m"\nport = 9100\nbogus = 1\n')
    r = subprocess.run([K25, "launch", "bad"], env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "'bogus'" in r.stderr
    assert "unknown key" in r.stderr


def test_a_parking_vllm_engine_is_launched_with_registered_pinning_from_the_settings(tmp_path: Path) -> None:
    """Issue 51: the threads torch registers a level-1 park's backup with come from the settings
    (K25_PARK_PIN_THREADS here), in the environment the engine is exec'd with."""
    script = "import os; print(os.environ['PYTORCH_CUDA_ALLOC_CONF'])"
    (tmp_path / "parky.toml").write_text(
        'engine = "vllm"\nmodel = "/m"\nport = 9101\ntensor_parallel_size = 1\ngpus = [0]\npark = "sleep"\n'
        f"command = {json.dumps([sys.executable, '-c', script, '--enable-sleep-mode'])}\n"
    )
    env = _env(tmp_path) | {"K25_PARK_PIN_THREADS": "32"}
    out = subprocess.run([K25, "launch", "parky"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pinned_use_cuda_host_register:True,pinned_num_register_threads:32"
