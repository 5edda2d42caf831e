"""install.sh as an operator runs it, on a fresh host: a sandbox whose systemd reads units from a private
/etc/systemd/system, with private /etc, /opt, /usr/local and /var (overlays: nothing reaches this
machine's). The package comes from this checkout; the engines are fake ones on simulated GPUs, named by the
operator's settings and profiles that exist before the install (install.sh must keep them)."""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from k25_sandbox import reaping
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import GPU_COUNT, fake_engine_profile
from k25_sandbox.ports import free_port
from k25_sandbox.units import REPO
from tests.playbooks import Played, play
from tests.sandboxing import Api
from tests.wheelhouse import offline_env, wheelhouse

pytestmark = pytest.mark.timeout(900)
SIM = Path("/opt/k25-sim")  # inside the host: fake GPU devices and model folders
OLD = REPO / "tests/fixtures/k25-ctl-0.0.9"
BASELINE = "vllm-kimi-k25-int4.service"


class Host:
    """A fresh-host sandbox and what the test needs of it."""

    def __init__(self, info: sbx.SandboxInfo) -> None:
        self.info = info
        self.root = Path(f"/proc/{info.pid}/root")  # the host's file system as its processes see it
        self.engine_port = free_port()

    def path(self, p: str | Path) -> Path:
        return self.root / str(p).lstrip("/")

    def sh(
        self, *argv: str, env: dict[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        cmd = self.info.inside(list(argv))
        at = cmd.index("env") + 1  # nsenter ... env K25_CONFIG=... ARGV
        return subprocess.run(cmd[:at] + extra + cmd[at:], capture_output=True, text=True, timeout=timeout)

    def install(
        self, *args: str, env: dict[str, str] | None = None, script: Path = REPO / "install.sh"
    ) -> str:
        """install.sh with the test run's wheels (--wheels; an older install.sh: pip's environment)."""
        wheels = wheelhouse()
        if script == REPO / "install.sh":
            args = ("--wheels", str(wheels), *args)
        else:
            env = offline_env(wheels) | (env or {})
        r = self.sh("bash", str(script), *args, env=env)
        assert r.returncode == 0, f"install.sh {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def show(self, unit: str, prop: str) -> str:
        return self.sh("systemctl", "show", "-P", prop, unit).stdout.strip()

    def seed(self) -> None:
        """What the operator has before installing: settings for this (GPU-less) host and a baseline
        profile served by the fake engine."""
        for i in range(GPU_COUNT):
            self.path(SIM / "dev").mkdir(parents=True, exist_ok=True)
            self.path(SIM / f"dev/nvidia{i}").write_bytes(b"\0" * 4096)
        for d in ("Kimi-K2.5-INT4", "Kimi-K2.5-EAGLE3"):
            self.path(SIM / "models" / d).mkdir(parents=True, exist_ok=True)
        etc = self.path("/etc/k25-ctl")
        (etc / "profiles.d").mkdir(parents=True)
        settings = {
            "gpu_backend": '"simulated"',
            "gpu_device_glob": f'"{SIM}/dev/nvidia*"',
            "port": str(self.info.port),
            "term_grace_s": "5",
            "kill_grace_s": "5",
            "verify_timeout_s": "20",
        }
        (etc / "k25-ctl.toml").write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        profile = fake_engine_profile(
            "baseline",
            flavor="vllm",
            port=self.engine_port,
            models=SIM / "models",
            load_seconds=1.0,
            unit=BASELINE,
        )
        (etc / "profiles.d/baseline.toml").write_text(profile)

    def api(self) -> Api:
        return Api(self.info)

    def role(self, folder: Path, *args: str, src: Path = REPO) -> Played:
        """The collection's `install` role on this host (k25.ctl.install, install.sh from the checkout
        `src`): Ansible's local connection, its modules run inside the host by an interpreter that enters
        it."""
        folder.mkdir(exist_ok=True)
        python = folder / "python-in-host"
        python.write_text(f'#!/bin/sh\nexec nsenter -t {self.info.pid} -m -p /usr/bin/python3 "$@"\n')
        python.chmod(0o755)
        (folder / "hosts.ini").write_text(
            f"host ansible_connection=local ansible_python_interpreter={python}\n"
        )
        (folder / "install.yml").write_text(
            "- hosts: all\n  gather_facts: false\n  roles:\n"
            f"    - {{role: k25.ctl.install, k25_ctl_src: {src}, k25_ctl_wheels: {wheelhouse()}}}\n"
        )
        return play(folder / "hosts.ini", str(folder / "install.yml"), *args, home=folder)

    def unit_processes(self) -> list[tuple[str, str]]:
        """(unit, command line) of every process of a service in this host but D-Bus and journald."""
        out = []
        for pid in reaping.namespace_pids(self.info.pid_ns, self.info.mnt_ns):
            try:
                groups = Path(f"/proc/{pid}/cgroup").read_text()
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            m = re.search(r"/system\.slice/([^/\n]+)", groups)
            if m and m[1] not in ("dbus.service", "systemd-journald.service"):
                out.append((m[1], cmd))
        return out


@pytest.fixture
def host() -> Iterator[Host]:
    info = sbx.up(fresh_host=True, port=free_port())
    h = Host(info)
    h.seed()
    yield h
    sbx.down(info)
    assert sbx.leftovers(info) == []


def _sql(h: Host, db: str, query: str) -> str:
    """One value from a database of the host, read inside it (sqlite3 wants the file's own path)."""
    py = f"import sqlite3; print(sqlite3.connect({db!r}).execute({query!r}).fetchone()[0])"
    r = h.sh(sys.executable, "-c", py)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _runs(h: Host) -> int:
    return int(_sql(h, "/var/lib/k25-ctl/k25.db", "select count(*) from runs"))


def _untouched(h: Host) -> None:
    for p in (
        "/opt/k25-ctl",
        "/usr/local/bin/k25-ctl",
        "/var/lib/k25-ctl",
        "/etc/systemd/system/k25-ctl.service",
    ):
        assert not h.path(p).exists(), p
    assert sorted(p.name for p in h.path("/etc/k25-ctl").rglob("*")) == [
        "baseline.toml",
        "k25-ctl.toml",
        "profiles.d",
    ]


def test_checks_fail_before_anything_is_touched(host: Host, tmp_path: Path) -> None:
    script = host.path(SIM / "install.sh")  # where an unprivileged user can read it
    shutil.copy(REPO / "install.sh", script)
    script.chmod(0o755)
    r = host.sh(
        "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(SIM / "install.sh")
    )
    assert r.returncode == 1, r.stderr
    assert "run as root" in r.stderr
    old = host.path(SIM / "python3.9")
    old.write_text('#!/bin/sh\n[ "$1" = -c ] && case $2 in *platform*) echo 3.9.18;; *) exit 1;; esac\n')
    old.chmod(0o755)
    r = host.sh("bash", str(REPO / "install.sh"), env={"PYTHON": str(SIM / "python3.9")})
    assert r.returncode == 1, r.stdout
    assert "Python >= 3.11 is required; found: /opt/k25-sim/python3.9 (3.9.18)" in r.stderr
    # An index that refuses, and no other source of packages (pip's cache, extra indexes, local wheels).
    offline = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
               "PIP_NO_CACHE_DIR": "1", "PIP_RETRIES": "0", "PIP_CONFIG_FILE": "/dev/null"}  # fmt: skip
    r = host.sh("bash", str(REPO / "install.sh"), env=offline)
    assert r.returncode == 1, r.stdout
    assert "cannot get k25-ctl's packages from the package index" in r.stderr
    assert "PIP_INDEX_URL" in r.stderr
    assert "Nothing was changed" in r.stderr
    if not Path("/run/systemd/system").exists():  # outside the sandbox, on a machine without systemd as init
        out = subprocess.run(["bash", str(REPO / "install.sh")], capture_output=True, text=True, check=False)
        assert out.returncode == 1
        assert "systemd is not running as init" in out.stderr
    dry = host.install("--dry-run")
    assert "would: install k25-ctl into /opt/k25-ctl/venv" in dry
    assert "would: start k25-ctl.service" in dry
    assert dry.strip().endswith("nothing was changed")
    _untouched(host)


def test_a_fresh_install_serves_and_a_second_changes_nothing(host: Host, tmp_path: Path) -> None:
    checked = host.role(tmp_path, "--check", "--diff")  # the role in check mode: install.sh --dry-run
    assert (checked.rc, checked.recap["host"]["changed"]) == (0, 1), checked.out
    assert "would: install k25-ctl" in checked.out
    assert not host.path("/opt/k25-ctl").exists()
    staged = host.install("--no-start")
    assert "not started (--no-start)" in staged
    assert (host.show("k25-ctl.service", "ActiveState"), host.show("k25-ctl.service", "UnitFileState")) == (
        "inactive", "disabled")  # fmt: skip
    assert host.path("/var/lib/k25-ctl/k25.db").exists()
    out = host.install()  # the venv is current: enable and start
    assert "install k25-ctl" not in out
    assert "enable k25-ctl.service" in out
    assert host.show("k25-ctl.service", "ActiveState") == "active", out
    status = host.show("k25-ctl.service", "StatusText")
    assert status.startswith("idle"), status
    assert f"k25-ctl.service: {status}" in out
    assert httpx.get(host.info.url + "/healthz", timeout=10).status_code == 200
    for name in ("token", "capture-token"):  # the admin's, and the balancer's mirror's
        token = host.path(f"/etc/k25-ctl/{name}")
        assert token.stat().st_mode & 0o777 == 0o600
        assert token.read_text().strip()
    assert host.path("/etc/k25-ctl/token").read_text() != host.path("/etc/k25-ctl/capture-token").read_text()
    assert host.path("/usr/local/bin/k25-ctl").readlink() == Path("/opt/k25-ctl/venv/bin/k25-ctl")
    # A production install carries no test double: no sandbox package, and `k25-ctl sandbox` says so.
    assert host.sh("/opt/k25-ctl/venv/bin/python", "-c", "import k25_sandbox").returncode != 0
    missing = host.sh("/usr/local/bin/k25-ctl", "sandbox", "up")
    assert (missing.returncode, "the sandbox is not installed here" in missing.stderr) == (2, True), missing
    # The operator's profile and settings kept; the stock profiles it lacked added.
    assert "fake_engine" in host.path("/etc/k25-ctl/profiles.d/baseline.toml").read_text()
    assert {p.name for p in host.path("/etc/k25-ctl/profiles.d").iterdir()} == {
        "baseline.toml", "vllm-eagle3.toml", "sglang-eagle3.toml"}  # fmt: skip
    # The hardened unit in force: 4 capabilities (dac_read_search 2, fowner 3, kill 5, sys_ptrace 19),
    # no new privileges, a seccomp filter, a read-only /usr.
    proc = host.path(
        f"/proc/{host.show('k25-ctl.service', 'MainPID')}/status"
    ).read_text()  # its PID namespace
    assert re.search(r"^CapBnd:\s+0*8002c$", proc, re.M), proc
    assert re.search(r"^NoNewPrivs:\s+1$", proc, re.M)
    assert re.search(r"^Seccomp:\s+2$", proc, re.M)
    unit = host.path("/etc/systemd/system/k25-ctl.service").read_text()
    assert "ExecStart=/opt/k25-ctl/venv/bin/k25-ctl serve" in unit
    assert "ProtectSystem=strict" in unit
    run = host.api().activate("baseline")  # with the token install.sh made
    assert run["outcome"] == "active", run["error"]
    assert host.show(BASELINE, "ActiveState") == "active"
    # The daily online backup: its timer enabled; its service run now, beside the daemon, leaves a sound copy.
    assert host.show("k25-ctl-backup.timer", "UnitFileState") == "enabled", out
    assert "enable the daily database backup" in out
    backed = host.sh("systemctl", "start", "k25-ctl-backup.service")
    assert backed.returncode == 0, host.sh("journalctl", "-u", "k25-ctl-backup", "--no-pager").stdout
    (copy,) = host.path("/var/lib/k25-ctl/backups").glob("k25.db.backup-*")
    assert host.sh("/usr/local/bin/k25-ctl", "db", "status").returncode == 0
    shutil.copy(copy, tmp_path / "backup.db")  # read here, outside the sandbox's private /var
    assert sqlite3.connect(tmp_path / "backup.db").execute("PRAGMA quick_check").fetchone() == ("ok",)
    pid, files = host.show("k25-ctl.service", "MainPID"), _snapshot(host)
    again = host.install()
    assert again.strip().splitlines()[-1] == "nothing to change", again
    rerun = host.role(tmp_path)  # the role, as a fleet runs it again: nothing to change
    assert (rerun.rc, rerun.recap["host"]["changed"], rerun.recap["host"]["failed"]) == (0, 0, 0), rerun.out
    assert host.show("k25-ctl.service", "MainPID") == pid
    assert _snapshot(host) == files


def _snapshot(h: Host) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file install.sh writes outside the venv."""
    out = {}
    for top in ("/etc/k25-ctl", "/etc/systemd/system", "/opt/k25-ctl"):
        for p in h.path(top).rglob("*"):
            if "/venv/" not in str(p) and p.is_file():
                st = p.stat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def test_a_hand_written_baseline_unit_is_kept_adopted_and_outlives_an_uninstall(host: Host) -> None:
    unit = (
        "[Unit]\nDescription=vLLM Kimi-K2.5 INT4 (written by hand)\n\n[Service]\n"
        f"ExecStart={sys.executable} -m k25_sandbox.fake_engine --flavor vllm --port {host.engine_port} "
        f"--served-model-name kimi-k2.5 --model {SIM}/models/Kimi-K2.5-INT4 --load-seconds 1 --device-dir {SIM}/dev\n"
        f"WorkingDirectory={REPO}\n\n[Install]\nWantedBy=multi-user.target\n"
    )
    host.path(f"/etc/systemd/system/{BASELINE}").write_text(unit)
    host.sh("systemctl", "daemon-reload")
    assert host.sh("systemctl", "start", BASELINE).returncode == 0
    engine = host.show(BASELINE, "MainPID")
    out = host.install("--prefix", "/opt/k25")  # and not in the default place
    assert f"found /etc/systemd/system/{BASELINE}: not k25-ctl's; keeping it and adopting it" in out
    assert (
        "ExecStart=/opt/k25/venv/bin/k25-ctl serve"
        in host.path("/etc/systemd/system/k25-ctl.service").read_text()
    )
    assert host.path("/usr/local/bin/k25-ctl").readlink() == Path("/opt/k25/venv/bin/k25-ctl")
    assert host.path(f"/etc/systemd/system/{BASELINE}").read_text() == unit
    profile = host.path("/etc/k25-ctl/profiles.d/baseline.toml").read_text()
    assert tomllib.loads(profile)["adopt"] is True
    assert "command = " in profile  # the operator's profile kept, one key added
    api = host.api()
    st = api.wait_until(lambda: (s := api.status())["state"] == "active" and s, what="baseline adopted")
    assert st["active_profile"] == "baseline"
    assert host.show(BASELINE, "MainPID") == engine  # running on, never restarted
    # Without --prefix, the existing install is found where it is.
    assert host.install().strip().splitlines()[-1] == "nothing to change"

    out = host.install("--uninstall")
    assert f"kept /etc/systemd/system/{BASELINE}: the operator's own unit" in out
    for p in ("/opt/k25", "/usr/local/bin/k25-ctl", "/etc/systemd/system/k25-ctl.service",
              "/etc/systemd/system/k25-engine@.service", "/etc/systemd/system/k25-ctl-backup.timer",
              "/etc/systemd/system/k25-ctl-backup.service"):  # fmt: skip
        assert not host.path(p).exists(), p
    assert "disable k25-ctl-backup.timer" in out
    assert host.show("k25-ctl.service", "LoadState") == "not-found"
    assert host.show("k25-ctl-backup.timer", "LoadState") == "not-found"
    assert host.show(BASELINE, "MainPID") == engine
    left = host.unit_processes()
    assert left
    assert {unit for unit, _ in left} == {BASELINE}, left
    assert host.path("/var/lib/k25-ctl/k25.db").exists()
    assert host.path("/etc/k25-ctl/token").exists()


def _checkout(dst: Path, *parts: str) -> Path:
    """A copy of these parts of this checkout (folders and files), as another release's checkout."""
    dst.mkdir()
    for part in parts:
        (shutil.copytree if (REPO / part).is_dir() else shutil.copy)(REPO / part, dst / part)
    return dst


def _older_install(h: Host, tmp: Path) -> None:
    """k25-ctl 0.0.9 as its own install.sh laid it out (tests/fixtures/k25-ctl-0.0.9)."""
    src = _checkout(tmp / "k25-ctl-0.0.9", "daemon", "migrations", "profiles", "README.md")
    # 0.0.9's pyproject: its version, and no unit files in the wheel (its install.sh copies none to build it)
    text = re.sub(r'^version = ".*"$', 'version = "0.0.9"', (REPO / "pyproject.toml").read_text(), flags=re.M)
    (src / "pyproject.toml").write_text(re.sub(r'^"share/k25-ctl/units" = .*\n', "", text, flags=re.M))
    shutil.copytree(OLD / "units", src / "units")
    shutil.copy(OLD / "install.sh", src / "install.sh")
    h.install(script=src / "install.sh")


def _next_version(tmp: Path) -> Path:
    """This checkout with one change in the package: what the next release's checkout is to install.sh."""
    src = _checkout(tmp / "k25-ctl-next", "daemon", "migrations", "profiles", "units", "README.md",
                    "pyproject.toml", "install.sh")  # fmt: skip
    with (src / "daemon/__init__.py").open("a") as f:
        f.write("# the next version\n")
    return src


def test_an_upgrade_backs_up_and_migrates_the_database_and_leaves_the_engine_running(
    host: Host, tmp_path: Path
) -> None:
    _older_install(host, tmp_path)
    assert host.show("k25-ctl.service", "ActiveState") == "active"
    assert host.api().activate("baseline")["outcome"] == "active"
    engine = host.show(BASELINE, "MainPID")
    # The older daemon's database at an older schema, runs in it (as 0.0.9's migrations left it).
    assert host.sh("systemctl", "stop", "k25-ctl.service").returncode == 0
    py = "from daemon.store.db import downgrade; from pathlib import Path; downgrade(Path('/var/lib/k25-ctl/k25.db'), '0003')"
    assert host.sh("/opt/k25-ctl/venv/bin/python", "-c", py).returncode == 0
    runs = _runs(host)
    assert runs >= 1

    out = host.install()
    assert "upgrade /opt/k25-ctl/venv (was 0.0.9)" in out, out
    backup = re.search(r"database backup: (\S+)", out)
    assert backup is not None, out
    assert re.fullmatch(r"/var/lib/k25-ctl/k25\.db\.backup-0003-\d{8}T\d{6}\.\d{3}", backup[1])
    assert _sql(host, backup[1], "select version_num from alembic_version") == "0003"
    assert host.sh("/opt/k25-ctl/venv/bin/k25-ctl", "db", "status").returncode == 0
    assert _runs(host) == runs
    assert host.show("k25-ctl.service", "ActiveState") == "active"
    assert host.show(BASELINE, "MainPID") == engine  # the engine never noticed
    assert "ProtectSystem=strict" in host.path("/etc/systemd/system/k25-ctl.service").read_text()
    assert not host.path("/opt/k25-ctl/daemon").exists()  # 0.0.9's copy of the sources
    api = host.api()
    st = api.wait_until(lambda: (s := api.status())["state"] == "active" and s, what="engine adopted")
    assert st["active_profile"] == "baseline"

    # The next version over a running daemon: the daemon restarts, the engine serves on, no migration due.
    daemon = host.show("k25-ctl.service", "MainPID")
    # Through the collection's role, as a fleet upgrades (-v: install.sh's output in the task's result).
    upgrade = host.role(tmp_path / "role", "-v", src=_next_version(tmp_path))
    assert (upgrade.rc, upgrade.recap["host"]["changed"]) == (0, 1), upgrade.out
    out = upgrade.out
    assert "upgrade /opt/k25-ctl/venv (was 0.1.0)" in out, out
    assert "restart k25-ctl.service (engines keep running)" in out
    assert "database backup" not in out
    assert host.show("k25-ctl.service", "MainPID") != daemon
    assert host.show(BASELINE, "MainPID") == engine
    st = api.wait_until(lambda: (s := api.status())["state"] == "active" and s, what="engine adopted again")
    assert st["active_profile"] == "baseline"

    out = host.install("--uninstall")
    for p in (
        "/opt/k25-ctl",
        "/usr/local/bin/k25-ctl",
        *(f"/etc/systemd/system/{u.name}" for u in OLD.glob("units/*")),
    ):
        assert not host.path(p).exists(), p
    assert host.unit_processes() == []
    assert host.path("/var/lib/k25-ctl/k25.db").exists()
    assert "kept /var/lib/k25-ctl (--purge removes it)" in out
    assert host.install("--uninstall").strip().endswith("nothing to change")
