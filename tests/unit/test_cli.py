"""The CLI as a shell user meets it: a closed pipe is not an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.cli.exit_codes import EXIT_FAILED

K25 = str(Path(sys.executable).parent / "k25-ctl")


def test_a_closed_pipe_prints_no_traceback(stock_profiles: Path, tmp_path: Path) -> None:
    r, w = os.pipe()
    os.close(r)  # the reader (`head -1`) is gone before k25-ctl writes
    env = dict(os.environ, K25_CONFIG=str(tmp_path / "absent.toml"), K25_STATE_DIR=str(tmp_path))
    p = subprocess.run([K25, "check-profiles", "--dir", str(stock_profiles), "--no-paths", "--json"],
                       stdout=w, stderr=subprocess.PIPE, text=True, env=env, timeout=60)  # fmt: skip
    os.close(w)
    assert p.stderr == ""
    assert p.returncode == 0


def test_check_profiles_output_through_head(stock_profiles: Path, tmp_path: Path) -> None:
    env = dict(os.environ, K25_CONFIG=str(tmp_path / "absent.toml"))
    p = subprocess.run(f"{K25} check-profiles --dir {stock_profiles} --no-paths | head -1", shell=True,  # noqa: S602
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.stdout.startswith("ok ")
    assert "Traceback" not in p.stderr


def test_check_profiles_notes_the_service_port(stock_profiles: Path, tmp_path: Path) -> None:
    config = tmp_path / "k25-ctl.toml"
    config.write_text("service_port = 8000\n")
    env = dict(os.environ, K25_CONFIG=str(config))
    p = subprocess.run([K25, "check-profiles", "--dir", str(stock_profiles), "--no-paths"],
                       capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "note: service_port = 8000: every engine listens on it" in p.stdout


def test_every_command_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats help with %: a literal % in a help text must be %% (`bench --help` crashed)."""
    from daemon.cli.main import main

    for command in ("bench", "experiment", "import-benchmark", "benchmark", "compare"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0, command
        assert "usage:" in capsys.readouterr().out


def test_check_profiles_asks_the_installed_engine_once_per_version(tmp_path: Path) -> None:
    """Ten profiles on the fake vLLM, one of them with a typo: one help asked, the typo named with the
    version and the nearest flag; a second run asks nothing (the cache in the state folder)."""
    from k25_sandbox.layout import fake_engine_profile, make_models

    models, folder = tmp_path / "models", tmp_path / "profiles"
    make_models(models)
    folder.mkdir()
    for i in range(10):
        args = ("--lod-seconds", "1") if i == 9 else ()
        text = fake_engine_profile(f"p{i}", flavor="vllm", port=9300 + i, models=models, load_seconds=1,
                                   engine_args=args)  # fmt: skip
        (folder / f"p{i}.toml").write_text(text)
    env = dict(os.environ, K25_CONFIG=str(tmp_path / "absent.toml"), K25_STATE_DIR=str(tmp_path))
    argv = [K25, "check-profiles", "--dir", str(folder), "--no-paths", "--json"]
    runs = [subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120) for _ in range(2)]
    first, again = (json.loads(p.stdout) for p in runs)
    assert runs[0].returncode == EXIT_FAILED  # one invalid profile
    assert first["engines_asked"] == 1
    assert again["engines_asked"] == 0
    assert first["valid"]["p0"]["engine"] == "vLLM 0.32.0"
    assert len(first["valid"]) == 9
    assert "--lod-seconds: not a flag of vLLM 0.32.0; did you mean --load-seconds?" in first["invalid"][0]
