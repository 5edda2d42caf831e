"""The sandbox itself: the daemon runs in it as k25-ctl.service, two can run at once, `down` leaves
nothing behind (no process, no mount namespace, no cgroup, no dir)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx

from k25_sandbox import sandbox as sbx
from k25_sandbox.sandbox import SandboxInfo
from k25_sandbox.units import SANDBOX_NICE
from tests.sandboxing import Api, daemon_pid, inside, probe, write_fault_profiles

K25 = str(Path(sys.executable).parent / "k25-ctl")


def test_daemon_runs_as_a_unit_with_its_api(sandbox: SandboxInfo) -> None:
    r = inside(sandbox, "systemctl", "show", "-p", "ActiveState", "-p", "Type", "k25-ctl.service")
    assert "ActiveState=active" in r.stdout
    assert "Type=notify" in r.stdout
    # The daemon and the engines run ahead of the machine's other processes (units.SANDBOX_NICE): a fake
    # engine's pace is the CPU's, where a real one's is its GPU's.
    for unit in ("k25-ctl.service", "k25-engine@vllm-eagle3.service", "vllm-kimi-k25-int4.service"):
        nice = inside(sandbox, "systemctl", "show", "-P", "Nice", unit).stdout.strip()
        assert nice == str(SANDBOX_NICE), (unit, nice)
    pid = daemon_pid(sandbox)  # in the sandbox's PID namespace
    assert inside(sandbox, "ps", "-o", "ni=", "-p", pid).stdout.strip() == str(SANDBOX_NICE)
    status = httpx.get(f"{sandbox.url}/status", timeout=10).json()
    profiles = {p["name"]: p for p in httpx.get(f"{sandbox.url}/profiles", timeout=10).json()}
    # the stock sandbox profiles plus the ones added with --profiles
    assert {"baseline", "vllm-eagle3", "sglang-eagle3", "crashy", "stubborn"} <= set(profiles)
    assert profiles["baseline"]["unit"] == "vllm-kimi-k25-int4.service"
    assert profiles["baseline"]["engine"] == "vllm"
    assert profiles["baseline"]["valid"] is True
    assert len(status["gpus"]) == 8
    assert Path(sandbox.token_file).stat().st_mode & 0o777 == 0o600


def test_status_json_from_the_cli(sandbox: SandboxInfo) -> None:
    r = subprocess.run(
        [K25, "sandbox", "status", sandbox.name, "--json"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["pid"] == sandbox.pid
    assert data["url"] == sandbox.url
    assert data["alive"] is True


def test_two_sandboxes_at_once_and_down_leaves_nothing(sandbox: SandboxInfo, tmp_path: Path) -> None:
    write_fault_profiles(tmp_path / "profiles", tmp_path / "models")
    profiles = str(tmp_path / "profiles")
    up = [
        K25,
        "sandbox",
        "up",
        "--json",
        "--load-seconds",
        "0.5",
        "--profiles",
        profiles,
        "--activate",
        "baseline",
    ]
    r = subprocess.run(up, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    other = sbx.SandboxInfo(**{k: v for k, v in json.loads(r.stdout).items() if k != "alive"})
    try:
        _two_at_once(sandbox, other)
    finally:
        if Path(other.dir).exists():
            sbx.down(other)


def _two_at_once(sandbox: SandboxInfo, other: SandboxInfo) -> None:
    # `--activate` started the engine after the daemon was up: the daemon followed it.
    other_api = Api(other)
    status = other_api.wait_until(
        lambda: (s := other_api.status())["state"] == "active" and s, what="followed the --activate start"
    )
    assert status["active_profile"] == "baseline"
    assert other.port != sandbox.port
    assert other.dir != sandbox.dir
    assert other.pid_ns != sandbox.pid_ns
    # The same unit name runs in both without touching the other's cgroup.
    for info in (sandbox, other):
        assert inside(info, "systemctl", "start", "vllm-kimi-k25-int4.service").returncode == 0
    cg = [
        inside(
            i, "systemctl", "show", "-p", "ControlGroup", "--value", "vllm-kimi-k25-int4.service"
        ).stdout.strip()
        for i in (sandbox, other)
    ]
    assert cg[0] != cg[1]
    # An orphan that escaped its unit's cgroup is still the sandbox's: `down` must take it too.
    procs = probe(other, "start_ready", "k25-engine@orphaner.service", "orphaner")
    orphan = next(p for p in procs if p["title"] == "sglang::scheduler_TP8")
    assert "/system.slice/" not in orphan["cgroup"]
    assert orphan["ppid"] == 1
    assert orphan["mapped"]
    r = subprocess.run(
        [K25, "sandbox", "down", other.name, "--json"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["left"] == []
    # Gone when `down` returned (issue 49): the sandbox's PID 1 reaped, not a zombie waiting for the host's
    # init, and unshare (its parent, outside the PID namespace) exited.
    assert not Path(f"/proc/{other.pid}").exists()
    assert _state(other.unshare_pid) in (None, "Z")
    assert sbx.leftovers(other) == []
    assert not Path(other.dir).exists()
    # The first sandbox is untouched.
    assert httpx.get(f"{sandbox.url}/healthz", timeout=10).status_code == 200
    assert inside(sandbox, "systemctl", "is-active", "vllm-kimi-k25-int4.service").stdout.strip() == "active"
    inside(sandbox, "systemctl", "stop", "vllm-kimi-k25-int4.service")


def test_a_down_of_a_gone_sandbox_touches_no_other(sandbox: SandboxInfo) -> None:
    """Namespace ids are reused once a namespace is gone, often by the next sandbox booted (another test's,
    on another worker). A second down() of a sandbox already down, or leftovers() after it, must not take
    the new sandbox's processes for its own: the session's sandbox, booted before, runs on untouched."""
    first = sbx.up(load_seconds=0.5)
    sbx.down(first)
    second = sbx.up(load_seconds=0.5)  # likely in the namespace ids `first` had
    try:
        sbx.down(first)
        assert sbx.leftovers(first) == []
        assert second.alive
        assert sandbox.alive
        assert Api(second).status()["state"] in ("idle", "active")
    finally:
        sbx.down(second)
    assert sbx.leftovers(second) == []


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
