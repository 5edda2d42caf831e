"""install.sh into a staging root: command, units, settings, profiles, a private token, a migrated database."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_install_into_a_staging_root(tmp_path: Path) -> None:
    env = dict(os.environ, ROOT=str(tmp_path))
    for _ in range(2):  # idempotent: the second run keeps the token
        r = subprocess.run(["bash", str(ROOT / "install.sh"), "--no-start"], env=env, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr
        token = (tmp_path / "etc/k25-ctl/token").read_text()
        if _ == 0:
            first = token
    assert token == first
    assert (tmp_path / "etc/k25-ctl/token").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "usr/local/bin/k25-ctl").resolve().is_file()
    assert {p.name for p in (tmp_path / "etc/k25-ctl/profiles.d").iterdir()} == {
        "baseline.toml", "vllm-eagle3.toml", "sglang-eagle3.toml"}  # fmt: skip
    assert (tmp_path / "etc/systemd/system/k25-ctl.service").is_file()
    with sqlite3.connect(tmp_path / "var/lib/k25-ctl/k25.db") as c:
        tables = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "run_events", "teardowns"} <= tables
