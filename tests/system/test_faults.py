"""Faults of a bad day, in the sandbox: the daemon killed while it stops an engine, a database that is
corrupt or empty at start, a restart with event streams open. Each ends in a state that tells the truth."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside, kill_daemon


def _served(port: int) -> list[Any]:
    """Established TCP connections whose local end is the daemon's port: the daemon's side of each."""
    return [c for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port]  # fmt: skip


def test_killed_during_stop_brings_the_known_good_back(api: Api, sandbox: SandboxInfo) -> None:
    assert api.activate("stubborn", force=True)["outcome"] == "active"  # ignores SIGTERM: a 3 s stop
    run_id = api.activate("baseline", wait=False)["run_id"]
    api.wait_until(lambda: api.status()["phase"] == "stop", what="stop phase")
    kill_daemon(api, sandbox)
    assert api.run(run_id)["outcome"] == "interrupted"
    # Nothing ran after the restart: the switch's undo is finished, the previous known-good comes back.
    restore = api.wait_until(
        lambda: next((r for r in api.client.get("/runs").json() if r["parent_id"] == run_id), None),
        what="the restoring run",
    )
    restore = api.wait_run(restore["id"])
    assert (restore["kind"], restore["profile"], restore["from_profile"]) == (
        "rollback",
        "stubborn",
        "baseline",
    )
    assert restore["outcome"] == "active"
    status = api.status()
    assert (status["state"], status["active_profile"]) == ("active", "stubborn")
    assert api.activate("baseline", force=True)["outcome"] == "active"


def _restart_with(sandbox: SandboxInfo, damage: Any) -> None:
    assert inside(sandbox, "systemctl", "stop", "k25-ctl.service").returncode == 0
    damage(Path(sandbox.dir) / "state/k25.db")
    assert inside(sandbox, "systemctl", "start", "k25-ctl.service").returncode == 0


def _garbage(db: Path) -> None:
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(b"this is not a database" * 500)


def _empty(db: Path) -> None:
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    db.write_bytes(b"")


def test_a_corrupt_or_empty_database_is_moved_aside_loudly(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    serving = "baseline"
    for damage, why, then in ((_garbage, "not a usable SQLite database", "sglang-eagle3"),
                              (_empty, "empty (0 bytes)", "baseline")):  # fmt: skip
        _restart_with(sandbox, damage)
        status = api.wait_until(lambda: api.status(), what="daemon back")
        assert len(status["warnings"]) == 1
        warning = status["warnings"][0]
        assert why in warning
        assert "run history starts fresh" in warning
        kept = Path(warning.split("moved to ")[1].split(";")[0])
        assert kept.exists()
        line = inside(sandbox, "systemctl", "status", "--no-pager", "k25-ctl.service").stdout
        assert "WARNING: runs database:" in line
        # Control keeps working on the fresh database, and the engine that served still serves.
        assert (status["state"], status["active_profile"]) == ("active", serving)
        assert api.activate(then)["outcome"] == "active"
        serving = then
        with sqlite3.connect(Path(sandbox.dir) / "state/k25.db") as c:
            assert c.execute("pragma integrity_check").fetchone()[0] == "ok"


def test_a_restart_with_event_streams_open_is_prompt(api: Api, sandbox: SandboxInfo) -> None:
    ended: list[float] = []

    def follow() -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream("GET", f"{sandbox.url}/events", timeout=httpx.Timeout(10, read=None)) as r,
        ):
            for _ in r.iter_lines():
                pass
        ended.append(time.monotonic())

    threads = [threading.Thread(target=follow, daemon=True) for _ in range(20)]
    for t in threads:
        t.start()
    # The daemon's own ends of the streams (the network namespace is shared): all 20 are held before the stop.
    held = api.wait_until(lambda: len(_served(sandbox.port)) >= 20 and _served(sandbox.port),
                          within_s=30, what="20 event streams held by the daemon")  # fmt: skip
    cursor = (
        inside(sandbox, "journalctl", "--show-cursor", "-n", "0", "-q").stdout.split("cursor: ")[-1].strip()
    )
    began = time.monotonic()
    assert inside(sandbox, "systemctl", "restart", "k25-ctl.service").returncode == 0
    took = time.monotonic() - began
    print(f"systemctl restart k25-ctl with {len(held)} connections held (20 event streams): {took:.2f}s")
    for t in threads:
        t.join(timeout=10)
    assert len(ended) == 20  # every stream was ended by the stopping daemon, none hung
    assert api.client.get("/healthz").status_code == 200
    stop = inside(
        sandbox, "journalctl", "-u", "k25-ctl.service", "--after-cursor", cursor, "--no-pager"
    ).stdout
    assert "Stopped" in stop or "Deactivated" in stop, stop  # the journal covers the stop
    assert "timed out" not in stop, stop  # systemd never had to wait out TimeoutStopSec (no SIGKILL)
