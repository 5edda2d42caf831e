"""The simulation's world: a sandbox of its own (real systemd, D-Bus, journald, the real daemon) with quick
fake engines of every kind the walk needs, its state on a small tmpfs that a step can fill, and what the
steps and invariants do to it and read from it from outside."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from daemon.engines import ENGINES, all_front_end_titles, all_process_titles
from k25_sandbox import sandbox as sbx
from k25_sandbox.disk import fill, tmpfs
from k25_sandbox.faults import FAULT_PROFILES
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port

# The serving profiles: quick (0.3 s load, 2000 tok/s) so that a step is seconds. `alpha` and `beta` park
# (vLLM's sleep): a switch between them is a wake, and one of them is parked most of the time.
GOOD = ("alpha", "beta", "gamma")
PARKS = ("alpha", "beta")
# Each engine fault a switch must survive (the fake engine's, as the system tests name them).
FAULTY = ("crashy", "stubborn", "orphaner", "leaky", "deadlocked")
ALL_PROFILES = GOOD + FAULTY
STATE_SIZE = "64m"
DAEMON = "k25-ctl.service"
# A crashed engine's restart comes after this backoff, doubled per restart (2 an hour by default): the
# walk waits it out (invariants.settle) instead of the default 5 s.
RESTART_BACKOFF_S = 0.5
RESTART_QUIET_S = 1.0


def _write_profiles(folder: Path, models: Path) -> None:
    make_models(models)
    quick: dict[str, Any] = {"load_seconds": 0.3, "rate": 2000.0}
    specs: dict[str, dict[str, Any]] = {
        "alpha": {"flavor": "vllm", "park": "sleep", "wake_gbps": 1000.0},
        "beta": {"flavor": "vllm", "spec": {"k": 3, "acceptance": 0.5}, "park": "sleep", "wake_gbps": 1000.0},
        "gamma": {"flavor": "sglang", "spec": {"k": 3, "acceptance": 0.6}},
    }
    specs |= {name: dict(FAULT_PROFILES[name]) for name in FAULTY}
    for name, kw in specs.items():
        text = fake_engine_profile(name, port=free_port(), models=models, **(quick | kw))
        (folder / f"{name}.toml").write_text(text)


class World:
    """One booted sandbox and the handles a step needs. Use `booted()`."""

    def __init__(self, info: sbx.SandboxInfo, state: Path) -> None:
        self.info = info
        self.state = state  # the daemon's state folder (its database), a tmpfs of STATE_SIZE
        self.client = httpx.Client(
            base_url=info.url, timeout=120, headers={"Authorization": f"Bearer {info.token}"}
        )
        self.filler = state / "filler"
        profiles = self.client.get("/profiles").json()
        self.units: dict[str, str] = {p["name"]: p["unit"] for p in profiles}
        self.ports: dict[str, int] = {p["name"]: p["port"] for p in profiles}

    def inside(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.info.inside(list(argv)), capture_output=True, text=True, timeout=timeout)

    def facts(self) -> dict[str, Any]:
        """The units, engine processes and engine shm files as the sandbox itself shows them."""
        ask = {
            "units": sorted({*self.units.values(), DAEMON}),
            "titles": [*all_process_titles(), *all_front_end_titles()],
            "shm": sorted({p for e in ENGINES.values() for p in e.shm_patterns}),
        }
        r = self.inside(sys.executable, "-m", "perf.sim.inside", json.dumps(ask))
        if r.returncode != 0:
            raise RuntimeError(f"perf.sim.inside failed: {r.stderr[-2000:]}")
        facts: dict[str, Any] = json.loads(r.stdout)
        return facts

    def daemon_pid(self) -> str:
        return self.inside("systemctl", "show", "-p", "MainPID", "--value", DAEMON).stdout.strip()

    def kill_daemon(self) -> None:
        """SIGKILL, as an OOM kill or a crash would; systemd starts it again (Restart=on-failure)."""
        self.inside("systemctl", "kill", "-s", "KILL", DAEMON)

    def wait_daemon(self, *, old_pid: str | None = None, within_s: float = 60) -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            pid = self.daemon_pid()
            if pid not in ("0", old_pid):
                with contextlib.suppress(httpx.HTTPError):
                    if self.client.get("/healthz", timeout=2).status_code == 200:
                        return
            time.sleep(0.1)  # a client's poll of another process; nothing to subscribe to from here
        raise TimeoutError(f"the daemon did not answer again within {within_s}s")

    def signal_engine(self, profile: str, signal: str) -> bool:
        """`signal` to the profile's unit's main process (KILL: a crash, STOP: a hang); False if none ran."""
        unit = self.units[profile]
        pid = self.inside("systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
        if pid in ("", "0"):
            return False
        return self.inside("systemctl", "kill", "--kill-whom=main", "-s", signal, unit).returncode == 0

    def fill_disk(self) -> int:
        """Fill the state's file system: the bytes written."""
        return fill(self.filler)

    def free_disk(self) -> None:
        self.filler.unlink(missing_ok=True)

    @property
    def database(self) -> Path:
        return self.state / "k25.db"


@contextlib.contextmanager
def booted() -> Iterator[World]:
    """A fresh world; everything it booted or mounted is gone afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="k25-sim-"))
    try:
        profiles, models = folder / "profiles", folder / "models"
        profiles.mkdir()
        _write_profiles(profiles, models)
        with tmpfs(folder / "state", STATE_SIZE) as state:
            settings = {"state_dir": json.dumps(str(state)), "default_profile": json.dumps("alpha"),
                        "restart_backoff_s": str(RESTART_BACKOFF_S)}  # fmt: skip
            info = sbx.up(profiles=profiles, load_seconds=0.3, binds=(models, state), settings=settings)
            try:
                world = World(info, state)
                yield world
                world.client.close()
            finally:
                sbx.down(info)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
