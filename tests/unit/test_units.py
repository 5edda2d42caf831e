"""`systemd-analyze verify` on every unit file, with the paths they reference stubbed in a temp root."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "units"
STUB_TARGETS = ("sysinit", "basic", "shutdown", "sockets", "timers", "paths", "slices", "local-fs",
                "network", "network-online", "multi-user", "default")  # fmt: skip


@pytest.fixture
def root(tmp_path: Path) -> Path:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: .ci/run installs systemd")
    system = tmp_path / "etc/systemd/system"
    system.mkdir(parents=True)
    for t in STUB_TARGETS:
        (system / f"{t}.target").write_text(f"[Unit]\nDescription={t}\n")
    for unit in UNITS.glob("*.service"):
        shutil.copy(unit, system)
    return tmp_path


def _verify(root: Path, *names: str) -> subprocess.CompletedProcess[str]:
    system = root / "etc/systemd/system"
    cmd = ["systemd-analyze", "verify", f"--root={root}", *(str(system / n) for n in names)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _stub_binary(root: Path) -> None:
    for path in ("usr/local/bin/k25-ctl", "bin/kill"):
        exe = root / path
        exe.parent.mkdir(parents=True, exist_ok=True)
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)


def test_every_unit_verifies_clean(root: Path) -> None:
    _stub_binary(root)
    names = ["k25-ctl.service", "vllm-kimi-k25-int4.service", "k25-engine@vllm-eagle3.service"]
    shutil.copy(
        root / "etc/systemd/system/k25-engine@.service",
        root / "etc/systemd/system/k25-engine@vllm-eagle3.service",
    )
    r = _verify(root, *names)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ""  # unknown keys only warn: any output is a finding


def test_verify_catches_a_missing_binary(root: Path) -> None:
    r = _verify(root, "vllm-kimi-k25-int4.service")
    assert r.returncode != 0
    assert "k25-ctl" in r.stderr


@pytest.mark.parametrize("unit", ["vllm-kimi-k25-int4.service", "k25-engine@.service"])
def test_engine_units_leave_decisions_to_k25ctl(unit: str) -> None:
    text = (UNITS / unit).read_text()
    assert "KillMode=control-group" in text
    assert "Restart=no" in text
    assert "TimeoutStopSec=" in text
    assert "k25-ctl launch" in text


def test_daemon_unit_is_notify() -> None:
    text = (UNITS / "k25-ctl.service").read_text()
    assert "Type=notify" in text
    assert "k25-ctl serve" in text


@pytest.mark.parametrize("unit", ["vllm-kimi-k25-int4.service", "k25-engine@.service"])
def test_engine_units_exposure_is_at_most_7(root: Path, unit: str) -> None:
    """`systemd-analyze security --offline=yes`: 9.6 UNSAFE before the engine units' hardening."""
    system = root / "etc/systemd/system"
    name = unit.replace("@.", "@probe.")
    if name != unit:
        shutil.copy(system / unit, system / name)
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(system / name)],
                       capture_output=True, text=True, timeout=60, cwd=system)  # fmt: skip
    line = next(x for x in r.stdout.splitlines() if "Overall exposure level" in x)
    exposure = float(line.split(":")[1].split()[0])
    print(line)
    assert exposure <= 7.0, line
    # What a GPU engine needs is left alone: devices, /dev/shm and IPC, the network, /tmp and home.
    text = (UNITS / unit).read_text()
    for kept in ("PrivateDevices", "DeviceAllow", "PrivateIPC", "PrivateNetwork", "PrivateTmp", "ProtectHome",
                 "RestrictAddressFamilies", "MemoryDenyWriteExecute", "ProtectClock"):  # fmt: skip
        assert f"\n{kept}=" not in text, kept
