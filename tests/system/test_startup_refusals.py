"""Start-up refusals (#23): each is one journal line at priority err that says what to do, exit status 78,
no restart loop (RestartPreventExitStatus=78), and `systemctl status k25-ctl` shows the line. The daemon
runs under its real unit in a sandbox of its own; each case breaks one thing, restarts, checks, repairs."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from k25_sandbox import sandbox as sbx
from tests.sandboxing import inside
from tests.waiting import eventually_sync

UNIT = "k25-ctl.service"


@pytest.fixture(scope="module")
def box() -> Iterator[sbx.SandboxInfo]:
    if os.geteuid() != 0:
        pytest.fail("system tests need root: they boot systemd in namespaces")
    info = sbx.up(load_seconds=0.5)
    yield info
    sbx.down(info)
    assert sbx.leftovers(info) == []


def _show(info: sbx.SandboxInfo) -> dict[str, str]:
    out = inside(
        info, "systemctl", "show", UNIT, "-p", "ActiveState,SubState,ExecMainStatus,NRestarts,Result"
    )
    return dict(line.split("=", 1) for line in out.stdout.strip().splitlines())


def _failed(info: sbx.SandboxInfo) -> dict[str, str] | None:
    state = _show(info)
    return state if state["ActiveState"] == "failed" else None


def _refused(info: sbx.SandboxInfo, expect: str) -> str:
    """Restart the daemon into a refusal; returns the err line. No restart loop, no traceback."""
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - 1))
    inside(info, "systemctl", "restart", UNIT)  # fails: the start job ends with the refusal
    state = eventually_sync(lambda: _failed(info), what="the daemon failed", within_s=30) or {}
    assert state["ExecMainStatus"] == "78", state
    assert state["NRestarts"] == "0", state  # RestartPreventExitStatus: not activating again and again

    # The window is whole seconds: it may hold the previous case's line too, and journald may write this
    # one a moment after the unit failed. This case's line is the last one (no restart loop: NRestarts 0).
    def said() -> str | None:
        journal = inside(info, "journalctl", "-u", UNIT, "--since", since, "-o", "cat", "-p", "err").stdout
        lines = [line for line in journal.splitlines() if "refusing to start" in line]
        return lines[-1] if lines and expect in lines[-1] else None

    line = eventually_sync(said, what=f"the refusal {expect!r} in the journal", within_s=15) or ""
    everything = inside(info, "journalctl", "-u", UNIT, "--since", since, "-o", "cat").stdout
    assert "Traceback" not in everything, everything
    status = inside(info, "systemctl", "status", "--no-pager", "-l", "-n", "5", UNIT).stdout
    assert "refusing to start" in status, status
    assert "status=78" in status, status
    return line


def _recovers(info: sbx.SandboxInfo) -> None:
    inside(info, "systemctl", "reset-failed", UNIT)
    assert inside(info, "systemctl", "restart", UNIT).returncode == 0
    assert _show(info)["ActiveState"] == "active"


def _case(info: sbx.SandboxInfo, expect: str, breaks: Callable[[], Callable[[], None]]) -> str:
    repair = breaks()
    try:
        return _refused(info, expect)
    finally:
        repair()
        _recovers(info)


def test_a_token_readable_by_others(box: sbx.SandboxInfo) -> None:
    token = Path(box.token_file)

    def breaks() -> Callable[[], None]:
        token.chmod(0o644)
        return lambda: token.chmod(0o600)

    line = _case(box, "is readable by others (mode 644): chmod 600 it", breaks)
    print(line)


def test_a_read_only_state_directory(box: sbx.SandboxInfo) -> None:
    state = Path(box.dir) / "state"

    def breaks() -> Callable[[], None]:
        # In the sandbox's mount namespace, where the daemon's unit takes its view from.
        assert inside(box, "mount", "--bind", str(state), str(state)).returncode == 0
        assert inside(box, "mount", "-o", "remount,bind,ro", str(state)).returncode == 0

        def repair() -> None:
            assert inside(box, "umount", str(state)).returncode == 0

        return repair

    print(_case(box, "cannot be opened for writing (Read-only file system)", breaks))


def test_invalid_settings(box: sbx.SandboxInfo) -> None:
    config = Path(box.config)

    def breaks() -> Callable[[], None]:
        before = config.read_text()
        config.write_text(before + "health_failures = -3\n")

        def repair() -> None:
            config.write_text(before)

        return repair

    print(_case(box, "health_failures: Input should be greater than", breaks))


def test_a_missing_profiles_folder(box: sbx.SandboxInfo) -> None:
    profiles = Path(box.dir) / "etc/profiles.d"

    def breaks() -> Callable[[], None]:
        away = profiles.rename(profiles.with_name("profiles.d.away"))

        def repair() -> None:
            away.rename(profiles)

        return repair

    print(_case(box, f"profiles folder {profiles} does not exist", breaks))


def test_the_port_in_use(box: sbx.SandboxInfo) -> None:
    holder = socket.socket()

    def breaks() -> Callable[[], None]:
        inside(box, "systemctl", "stop", UNIT)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", box.port))
        holder.listen(1)
        return holder.close

    print(_case(box, f"127.0.0.1:{box.port} is in use", breaks))


def test_an_unreadable_database(box: sbx.SandboxInfo) -> None:
    db = Path(box.dir) / "state/k25.db"

    def breaks() -> Callable[[], None]:
        inside(box, "systemctl", "stop", UNIT)
        os.chown(db, 65534, 65534)  # another user's, mode 0600: the daemon's root has no CAP_DAC_OVERRIDE

        def repair() -> None:
            os.chown(db, 0, 0)

        return repair

    print(_case(box, f"the runs database {db} cannot be opened for writing", breaks))
