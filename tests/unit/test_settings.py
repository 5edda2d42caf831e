from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from daemon.core.settings import load_settings


def test_defaults_without_a_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("K25_CONFIG", str(tmp_path / "absent.toml"))
    s = load_settings()
    assert s.profiles_path == Path("/etc/k25-ctl/profiles.d")
    assert s.database_path == Path("/var/lib/k25-ctl/k25.db")
    assert s.token_path == Path("/etc/k25-ctl/token")
    assert s.gpu_device_glob == "/dev/nvidia*"
    assert (s.bind_host, s.port) == ("127.0.0.1", 8025)


def test_file_then_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "k25-ctl.toml"
    cfg.write_text(f'config_dir = "{tmp_path}/etc"\nstate_dir = "{tmp_path}/state"\nport = 9025\n')
    monkeypatch.setenv("K25_CONFIG", str(cfg))
    monkeypatch.setenv("K25_PORT", "9026")
    monkeypatch.setenv("K25_SHM_DIR", str(tmp_path / "shm"))
    monkeypatch.setenv("K25_JOURNAL_COMMAND", '["nsenter", "-t", "1", "journalctl"]')
    s = load_settings()
    assert s.profiles_path == tmp_path / "etc/profiles.d"
    assert s.database_path == tmp_path / "state/k25.db"
    assert s.port == 9026  # the environment wins over the file
    assert s.shm_dir == tmp_path / "shm"
    assert s.journal_command == ["nsenter", "-t", "1", "journalctl"]


def test_unknown_key_in_file_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "k25-ctl.toml"
    cfg.write_text("prot = 1\n")
    monkeypatch.setenv("K25_CONFIG", str(cfg))
    with pytest.raises(ValidationError, match="prot"):
        load_settings()
