"""`k25-ctl db restore FILE` on real SQLite files migrated by Alembic: a backup restored gives back the
runs it held (the newer database kept beside it); a corrupted file, a file of a newer schema and a file
that is no k25-ctl database are refused with the reason and nothing is replaced; an older schema is
migrated; the CLI refuses while the daemon answers."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from daemon.cli.main import main
from daemon.core.run_types import NewRun, RunKind
from daemon.store import db
from daemon.store.queries import Store


def _store_with_runs(path: Path, n: int) -> None:
    store = Store.open(path)
    for _ in range(n):
        store.create_run(NewRun(RunKind.SWITCH, "baseline"))


def _runs(path: Path) -> list[int]:
    with sqlite3.connect(path) as c:
        return [r[0] for r in c.execute("SELECT id FROM runs ORDER BY id")]


def test_a_backup_restored_gives_back_its_runs_and_keeps_the_replaced_database(tmp_path: Path) -> None:
    path = tmp_path / "k25.db"
    _store_with_runs(path, 3)
    backup = db.backup(path)
    _store_with_runs(path, 2)
    assert len(_runs(path)) == 5
    kept, migrated = db.restore(path, backup)
    assert _runs(path) == [1, 2, 3]
    assert migrated is None
    assert kept is not None
    assert len(_runs(kept)) == 5  # the replaced database, whole
    assert db.healthy(path) is None
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("kind", ["corrupted", "newer", "foreign", "missing"])
def test_a_file_that_cannot_be_restored_is_refused_and_nothing_is_replaced(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "k25.db"
    _store_with_runs(path, 2)
    bad = tmp_path / "bad.db"
    if kind == "corrupted":
        data = bytearray(db.backup(path).read_bytes())
        data[100:4096] = b"\xff" * (4096 - 100)
        bad.write_bytes(bytes(data))
    elif kind == "newer":
        bad = db.backup(path)
        with sqlite3.connect(bad) as c:
            c.execute("UPDATE alembic_version SET version_num = '9999'")
    elif kind == "foreign":
        with sqlite3.connect(bad) as c:
            c.execute("CREATE TABLE notes (x TEXT)")
    with pytest.raises(db.RestoreRefused) as refused:
        db.restore(path, bad)
    said = str(refused.value)
    expected = {
        "corrupted": "not a usable SQLite database",
        "newer": "schema 9999 is not one this k25-ctl knows",
        "foreign": "not a k25-ctl database",
        "missing": "no such file",
    }[kind]
    assert expected in said or (kind == "corrupted" and "integrity check failed" in said), said
    assert _runs(path) == [1, 2]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("k25.db.replaced")) == []


def test_an_older_schema_is_migrated_as_it_is_restored(tmp_path: Path) -> None:
    path = tmp_path / "k25.db"
    _store_with_runs(path, 1)
    old = db.backup(path)
    db.downgrade(old, "0003")
    kept, migrated = db.restore(path, old)
    assert migrated == "0003"
    assert db.revisions(path)[0] == db.revisions(path)[1]
    assert _runs(path) == [1]
    assert kept is not None


def test_the_cli_restores_only_while_the_daemon_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state/k25.db"
    config = tmp_path / "k25-ctl.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nport = 9\n')  # port 9 (discard): nothing answers
    monkeypatch.setenv("K25_CONFIG", str(config))
    _store_with_runs(path, 2)
    backup = db.backup(path)
    _store_with_runs(path, 1)
    assert main(["db", "restore"]) == 2
    assert main(["db", "restore", str(backup)]) == 0
    assert _runs(path) == [1, 2]


def test_the_cli_refuses_while_the_daemon_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"ok": true}')

        def log_message(self, *_: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = tmp_path / "state/k25.db"
        config = tmp_path / "k25-ctl.toml"
        config.write_text(f'state_dir = "{tmp_path / "state"}"\nport = {server.server_address[1]}\n')
        monkeypatch.setenv("K25_CONFIG", str(config))
        _store_with_runs(path, 2)
        backup = db.backup(path)
        _store_with_runs(path, 1)
        assert main(["db", "restore", str(backup)]) == 4  # busy: nothing replaced
        assert _runs(path) == [1, 2, 3]
    finally:
        server.shutdown()


def test_the_scheduled_backup_keeps_the_newest_in_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What k25-ctl-backup.timer runs daily: `db backup --scheduled` into backup_dir, backups_keep kept."""
    path = tmp_path / "state/k25.db"
    config = tmp_path / "k25-ctl.toml"
    config.write_text(f'state_dir = "{tmp_path / "state"}"\nbackups_keep = 2\n')
    monkeypatch.setenv("K25_CONFIG", str(config))
    _store_with_runs(path, 1)
    for _ in range(3):
        assert main(["db", "backup", "--scheduled"]) == 0
        _store_with_runs(path, 1)
    folder = tmp_path / "state/backups"
    kept = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)
    assert len(kept) == 2, kept
    assert [len(_runs(k)) for k in kept] == [2, 3]  # the two newest: the first (1 run) went
    assert folder.stat().st_mode & 0o777 == 0o700
    assert all(k.stat().st_mode & 0o777 == 0o600 for k in kept)
    assert db.restore(path, kept[-1])[0] is not None  # a scheduled backup restores like any other
    assert len(_runs(path)) == 3
