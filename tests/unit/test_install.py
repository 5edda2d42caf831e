"""install.sh's own checks and the units it installs, without a host (tests/system/test_install.py runs it on
one): shellcheck clean, the units pass `systemd-analyze verify`, bad options are refused with a usage."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "install.sh"), *args], capture_output=True, text=True, timeout=60
    )


def test_install_sh_is_shellcheck_clean() -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is missing: scripts/setup.sh installs it")
    r = subprocess.run(["shellcheck", str(ROOT / "install.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_bad_options_are_refused_before_any_check() -> None:
    r = _install("--frobnicate")
    assert r.returncode == 2
    assert "unknown option --frobnicate" in r.stderr
    assert "--uninstall" in r.stderr  # the usage
    r = _install("--purge")
    assert r.returncode == 1
    assert "--purge goes with --uninstall" in r.stderr
    r = _install("--prefix", "relative/dir")
    assert r.returncode == 1
    assert "--prefix must be an absolute directory" in r.stderr
    r = _install("--wheels", "/nonexistent/wheels")
    assert r.returncode == 1
    assert "--wheels /nonexistent/wheels: no such directory" in r.stderr
    assert "--wheels DIR" in _install("--help").stdout
    assert _install("--help").returncode == 0


def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    # The command the units run, made to exist for verify (it checks that ExecStart is executable).
    fake = tmp_path / "k25-ctl"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    files = [*(ROOT / "units").glob("*.service"), *(ROOT / "units").glob("*.timer")]
    for unit in files:
        text = unit.read_text().replace("/usr/local/bin/k25-ctl", str(fake))
        (tmp_path / unit.name).write_text(text)
    units = sorted(str(tmp_path / u.name) for u in files if "@" not in u.name)
    assert any(u.endswith("k25-ctl-backup.timer") for u in units)  # the daily backup, and its service
    r = subprocess.run(["systemd-analyze", "verify", *units], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "k25-ctl.service" not in r.stderr, r.stderr  # no warning about the daemon's own unit
