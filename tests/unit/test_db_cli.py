"""`k25-ctl db status|backup|upgrade` on a real SQLite file: what install.sh's upgrade path relies on."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.main import main
from daemon.store import db


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "k25-ctl.toml"
    config.write_text(f'state_dir = "{tmp_path}"\nconfig_dir = "{tmp_path}"\n')
    monkeypatch.setenv("K25_CONFIG", str(config))
    return tmp_path / "k25.db"


def test_status_backup_and_upgrade_of_a_database_at_an_older_revision(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "status"]) == EXIT_FAILED
    assert "no database yet" in capsys.readouterr().out
    assert main(["db", "backup"]) == EXIT_FAILED  # nothing to back up: said, not a traceback
    assert main(["db", "upgrade"]) == EXIT_OK
    assert database.stat().st_mode & 0o777 == 0o600
    head = db.revisions(database)[1]
    db.downgrade(database, "0003")
    with sqlite3.connect(database) as c:
        c.execute("insert into runs (kind, profile, outcome, phase, started_at) values ('switch', 'baseline', 'active', 'active', "
                  "'2026-12-01 00:00:00')")  # fmt: skip
    capsys.readouterr()
    assert main(["db", "status"]) == EXIT_FAILED
    assert f"at 0003, head {head}" in capsys.readouterr().out
    assert main(["db", "backup"]) == EXIT_OK
    backup = Path(capsys.readouterr().out.strip())
    assert backup.name.startswith("k25.db.backup-0003-")
    assert backup.stat().st_mode & 0o777 == 0o600
    assert db.revisions(backup)[0] == "0003"
    assert main(["db", "upgrade"]) == EXIT_OK
    assert main(["db", "status"]) == EXIT_OK
    with sqlite3.connect(database) as c:
        assert c.execute("select count(*) from runs").fetchone()[0] == 1
