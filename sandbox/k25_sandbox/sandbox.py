"""Boot and tear down a sandbox: a private systemd (PID 1 of new PID, mount, UTS and IPC namespaces, in its
own cgroups) with D-Bus, journald, the k25-ctl daemon and fake engines. Everything it writes stays in its
temp dir or its tmpfs mounts; `down` leaves no process, mount or cgroup behind."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from daemon.core.errors import HostTimeout, K25Error, NotFound
from k25_sandbox import reaping
from k25_sandbox.cgroups import memory_dir, plan_cgroups
from k25_sandbox.layout import make_weights, write_tree
from k25_sandbox.ports import free_port
from k25_sandbox.units import work_dir, write_base_units

SANDBOX_HOME = Path(os.environ.get("K25_SANDBOX_HOME", "/tmp/k25-sandboxes"))


@dataclass
class SandboxInfo:
    name: str
    dir: str
    pid: int  # the sandbox's PID 1, as this (outer) PID namespace sees it
    unshare_pid: int
    port: int
    url: str
    token_file: str
    config: str
    pid_ns: str  # e.g. "pid:[4026532600]"
    mnt_ns: str
    cgroups: list[str] = field(default_factory=list)
    engine_ports: dict[str, int] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return Path(self.token_file).read_text().strip()

    @property
    def alive(self) -> bool:
        """Its PID 1 still runs in the namespace it booted in (a reused PID is another process)."""
        try:
            return str(Path(f"/proc/{self.pid}/ns/pid").readlink()) == self.pid_ns
        except OSError:
            return False

    def inside(self, argv: list[str]) -> list[str]:
        """argv run inside the sandbox's namespaces, with the daemon's config."""
        return [
            "nsenter",
            "-t",
            str(self.pid),
            "-m",
            "-p",
            f"--wd={work_dir()}",
            "env",
            f"K25_CONFIG={self.config}",
            *argv,
        ]


# A fresh host's private trees: overlays on the real ones (reads fall through, writes stay in the sandbox),
# with no trace of k25-ctl and no host units (systemd reads units from here, as on a host).
PRIVATE_TREES = ("etc", "opt", "usr/local", "var")
HOST_TRACES = (
    "/etc/k25-ctl",
    "/opt/k25-ctl",
    "/var/lib/k25-ctl",
    "/var/cache/k25-ctl",
    "/usr/local/bin/k25-ctl",
)


def _whiteouts(root: Path, tree: str) -> str:
    """The host's k25-ctl traces under `tree`, hidden by overlayfs whiteouts (a 0/0 character device in the
    upper layer) made before the mount: deleting them through the overlay instead raced the host's own
    writes there (the realengine tier's cache, in use by a test beside it: `rm: Directory not empty`)."""
    upper = root / "overlay" / tree / "upper"
    top = Path(f"/{tree}")
    hidden = [upper / Path(t).relative_to(top) for t in HOST_TRACES if Path(t).is_relative_to(top)]
    return "".join(f'mkdir -p "{h.parent}"\nmknod "{h}" c 0 0\n' for h in hidden)


def _host_mounts(root: Path) -> str:
    lines = []
    for tree in PRIVATE_TREES:
        upper, work = root / "overlay" / tree / "upper", root / "overlay" / tree / "work"
        lines.append(
            f'mkdir -p "{upper}" "{work}"\n'
            + _whiteouts(root, tree)
            + f'mount -t overlay overlay -o lowerdir=/{tree},upperdir="{upper}",workdir="{work}" /{tree}\n'
        )
    lines.append("mount -t tmpfs tmpfs /etc/systemd/system\n")
    return "".join(lines)


def _boot_script(root: Path, cgroups: list[str], *, fresh_host: bool) -> Path:
    script = root / "boot.sh"
    moves = "".join(
        f'mkdir -p "{d}" 2>/dev/null && echo $$ > "{d}/cgroup.procs" 2>/dev/null || true\n' for d in cgroups
    )
    unit_path = f"{root}/units:/etc/systemd/system" if fresh_host else f"{root}/units"
    script.write_text(
        "#!/bin/sh\n" + moves + "set -e\n"
        "mount -t tmpfs tmpfs /run\n"
        "mount -t tmpfs tmpfs /dev/shm\n"
        + (_host_mounts(root) if fresh_host else "")
        + "mkdir -p /run/systemd/journald.conf.d\n"
        "printf '[Journal]\\nStorage=volatile\\n' > /run/systemd/journald.conf.d/k25-sandbox.conf\n"
        f"export container=k25-sandbox SYSTEMD_UNIT_PATH={unit_path} NOTIFY_SOCKET={root}/notify.sock\n"
        "exec /usr/lib/systemd/systemd --system --unit=default.target\n"
    )
    script.chmod(0o755)
    return script


def _wait_ready(sock: socket.socket, unshare: subprocess.Popen[bytes], within_s: float, log: Path) -> None:
    """Wait for systemd's READY=1 (sent when default.target, the daemon included, is reached) or for the
    namespace to die, whichever comes first (then with the tail of the boot's output: the folder that
    holds it is removed)."""
    pidfd = os.pidfd_open(unshare.pid)
    deadline = time.monotonic() + within_s
    try:
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([sock.fileno(), pidfd], [], [], left)
            if pidfd in readable:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
                raise K25Error(f"the sandbox's systemd exited during boot (status {unshare.wait()}):\n{tail}")
            if sock.fileno() in readable and b"READY=1" in sock.recv(4096).split(b"\n"):
                return
        raise HostTimeout(f"the sandbox did not boot within {within_s:.0f}s")
    finally:
        os.close(pidfd)


def up(
    *,
    port: int | None = None,
    profiles: Path | None = None,
    load_seconds: float = 2.0,
    within_s: float = 90.0,
    settings: dict[str, str] | None = None,
    binds: tuple[Path, ...] = (),
    fresh_host: bool = False,
    weights: Path | None = None,
    weight_file_mib: int = 64,
    parks: tuple[str, ...] = (),
    memory_cgroup: bool = False,
) -> SandboxInfo:
    """Boot a sandbox; `settings` override the daemon's (TOML values as text: {"watch_interval_s": "10"});
    `binds`: folders outside its own that the daemon reads (its /tmp is private). `fresh_host`: systemd,
    D-Bus and journald only, on private /etc, /opt, /usr/local and /var: a host for install.sh (`port`: the
    one its settings will name). `weights`: real weight files for the stock profiles (4 of
    `weight_file_mib`, made there once). `parks`: the stock profiles that park (the demo shows a wake).
    `memory_cgroup`: the daemon reads MemAvailable from the sandbox's own memory cgroup (`memory_dir`),
    whose limit a test then sets."""
    if os.geteuid() != 0:
        raise K25Error("the sandbox needs root (it boots systemd in namespaces)")
    SANDBOX_HOME.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="sbx-", dir=SANDBOX_HOME))
    port, engine_ports = port or free_port(), {}
    cgroups = plan_cgroups(root.name)
    if memory_cgroup:
        if (mem := memory_dir(cgroups)) is None:
            raise K25Error("no writable memory cgroup here for the sandbox")
        settings = (settings or {}) | {"memory_cgroup": f'"{mem}"'}
    if fresh_host:
        write_base_units(root / "units")
    else:  # the stock profiles, their fake engines' ports, the units rendered for the sandbox
        if weights is not None:
            make_weights(weights, weight_file_mib)
            binds = (*binds, weights)
        engine_ports = write_tree(
            root,
            port=port,
            extra_profiles=profiles,
            load_seconds=load_seconds,
            settings=settings,
            binds=binds,
            weights=weights,
            parks=parks,
        )
    script = _boot_script(root, cgroups, fresh_host=fresh_host)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(root / "notify.sock"))
    unshare = _unshare(script, root / "boot.log")
    info = None
    try:
        _wait_ready(sock, unshare, within_s, root / "boot.log")
        import psutil

        init = psutil.Process(unshare.pid).children()[0].pid
        info = _info(root, init, unshare.pid, port, cgroups, engine_ports, fresh_host=fresh_host)
        (root / "sandbox.json").write_text(json.dumps(asdict(info), indent=2))
        if not fresh_host:
            _check_daemon(info)
        return info
    except BaseException:
        _destroy(root, unshare.pid, info, cgroups)
        raise
    finally:
        sock.close()


def _info(
    root: Path,
    init: int,
    unshare_pid: int,
    port: int,
    cgroups: list[str],
    engine_ports: dict[str, int],
    *,
    fresh_host: bool,
) -> SandboxInfo:
    """What a booted sandbox is (its PID 1 as this namespace sees it, its daemon, its namespaces)."""
    return SandboxInfo(
        name=root.name,
        dir=str(root),
        pid=init,
        unshare_pid=unshare_pid,
        port=port,
        url=f"http://127.0.0.1:{port}",
        token_file=f"/proc/{init}/root/etc/k25-ctl/token" if fresh_host else str(root / "etc/token"),
        config="/etc/k25-ctl/k25-ctl.toml" if fresh_host else str(root / "etc/k25-ctl.toml"),
        pid_ns=str(Path(f"/proc/{init}/ns/pid").readlink()),
        mnt_ns=str(Path(f"/proc/{init}/ns/mnt").readlink()),
        cgroups=cgroups,
        engine_ports=engine_ports,
    )


def _unshare(script: Path, log_path: Path) -> subprocess.Popen[bytes]:
    """The sandbox's systemd in its own PID, mount, UTS and IPC namespaces (DESIGN.md: the sandbox)."""
    argv = [
        "unshare",
        "--pid",
        "--fork",
        "--mount",
        "--uts",
        "--ipc",
        "--mount-proc",
        "--propagation",
        "private",
        str(script),
    ]
    with log_path.open("wb") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _check_daemon(info: SandboxInfo) -> None:
    """k25-ctl.service came up in the sandbox, or its journal says why not."""
    state = subprocess.run(
        info.inside(["systemctl", "is-active", "k25-ctl.service"]), capture_output=True, text=True
    )
    if state.stdout.strip() != "active":
        journal = subprocess.run(
            info.inside(["journalctl", "-u", "k25-ctl.service", "--no-pager", "-n", "40"]),
            capture_output=True,
            text=True,
        )
        raise K25Error(f"k25-ctl.service did not start in the sandbox:\n{journal.stdout}")


def _destroy(root: Path, unshare_pid: int, info: SandboxInfo | None, cgroups: list[str]) -> None:
    if info is None:
        reaping.kill_all(unshare_pid, None, None)
    else:
        reaping.kill_all(unshare_pid, info.pid, (info.pid_ns, info.mnt_ns))
    for top in cgroups:
        if Path(top).is_dir():
            for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
                with contextlib.suppress(OSError):
                    Path(dirpath).rmdir()
    shutil.rmtree(root, ignore_errors=True)


def start_profile(info: SandboxInfo, name: str, within_s: float = 300.0) -> None:
    """Start a profile's engine unit inside the sandbox and return once the daemon reports the host active
    with it (its /events stream, subscribed before the start): the engine has loaded and answers."""
    import httpx

    from daemon.core.profile_files import parse_profile
    from daemon.core.profiles import InvalidProfile

    item = parse_profile(Path(info.dir) / "etc/profiles.d" / f"{name}.toml")
    if isinstance(item, InvalidProfile):
        raise NotFound(f"no valid sandbox profile {name!r}: {item}")
    auth = {"Authorization": f"Bearer {info.token}"}
    with (
        httpx.Client(base_url=info.url, headers=auth, timeout=within_s) as client,
        client.stream("GET", "/events") as events,
    ):
        cmd = info.inside(["systemctl", "start", item.profile.unit])
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=within_s)
        if r.returncode != 0:
            raise K25Error(f"could not start {item.profile.unit}: {r.stderr.strip()}")
        deadline = time.monotonic() + within_s
        for line in events.iter_lines():
            state = json.loads(line[5:]) if line.startswith("data:") else {}
            if state.get("state") == "active" and state.get("active_profile") == name:
                return
            if time.monotonic() > deadline:
                break
    raise HostTimeout(f"{name} did not become active within {within_s:.0f}s")


def load(name: str | None = None) -> SandboxInfo:
    """A running sandbox by name, or the only/newest one."""
    candidates = sorted(SANDBOX_HOME.glob("sbx-*/sandbox.json"), key=lambda p: p.stat().st_mtime)
    if name:
        candidates = [c for c in candidates if c.parent.name == name]
    if not candidates:
        raise NotFound(f"no sandbox {name or ''} under {SANDBOX_HOME}".replace("  ", " "))
    return SandboxInfo(**json.loads(candidates[-1].read_text()))


def running_demo() -> SandboxInfo | None:
    """The newest sandbox that runs a daemon with its settings in its own folder (the demo's; a fresh host
    for install.sh has them inside), if any."""
    for found in sorted(
        SANDBOX_HOME.glob("sbx-*/sandbox.json"), key=lambda p: p.stat().st_mtime, reverse=True
    ):
        with contextlib.suppress(OSError, ValueError, TypeError):
            info = SandboxInfo(**json.loads(found.read_text()))
            if info.alive and Path(info.config).is_relative_to(info.dir):
                return info
    return None


def down(info: SandboxInfo) -> None:
    _destroy(Path(info.dir), info.unshare_pid, info, info.cgroups)


def leftovers(info: SandboxInfo) -> list[str]:
    """What of the sandbox still exists: processes in its namespaces (while its PID 1 runs: down() waits
    for every one of them before it returns), its cgroups, its dir."""
    found: list[str] = []
    with reaping.pinned(info.pid, info.pid_ns, info.mnt_ns) as ours:
        if ours:
            found += [reaping.describe(pid) for pid in reaping.namespace_pids(info.pid_ns, info.mnt_ns)]
    found += [f"cgroup {d}" for d in info.cgroups if Path(d).exists()]
    if Path(info.dir).exists():
        found.append(f"dir {info.dir}")
    return found
