"""What an operator reads after a switch in the sandbox: the daemon's journal (one line per step, each with
its run id, never mixed with engine output) and the engine running exactly the argv its run recorded."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside


def _journal(sandbox: SandboxInfo, *args: str) -> list[str]:
    out = inside(sandbox, "journalctl", "--no-pager", "-o", "cat", *args)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_daemon_journal_tells_a_switch_with_its_rollback(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    run = api.activate("crashy", expect="failed")
    rb = next(r for r in api.client.get("/runs", params={"limit": 5}).json() if r["parent_id"] == run["id"])
    api.wait_until(lambda: api.status()["state"] == "active", what="rollback")
    inside(sandbox, "journalctl", "--sync")
    daemon = _journal(sandbox, "-t", "k25-ctl")
    mine = [line for line in daemon if f"run {run['id']}:" in line or f"run {rb['id']}:" in line]
    print("\n".join(mine))  # the closing note quotes this
    text = "\n".join(mine)
    for expected in (
        f"run {run['id']}: switch crashy created",
        f"run {run['id']}: stop: stopped vllm-kimi-k25-int4.service",
        f"run {run['id']}: teardown: GPUs clean",
        f"run {run['id']}: start: k25-engine@crashy.service",
        f"run {run['id']}: cleanup: k25-engine@crashy.service exited during loading",
        f"run {run['id']}: ended failed",
        f"rolling back in run {rb['id']}",
        f"run {rb['id']}: rollback baseline (after run {run['id']}) created",
        f"run {rb['id']}: ended active",
    ):
        assert expected in text, expected
    assert any(f"(run {rb['id']}): active: baseline" in line for line in daemon)  # the host's state change
    # Engine output stays under the engine's identifier: every k25-ctl line is one of the daemon's loggers.
    strangers = [line for line in daemon if not re.match(r"(k25\.\w+|uvicorn[.\w]*|alembic[.\w]*): ", line)]
    assert strangers == []
    engine = _journal(sandbox, "-t", "k25-engine-crashy")
    assert any("Loading safetensors checkpoint shards" in line for line in engine)
    # Priorities map: the failure is a warning, the load progress is not.
    warnings = _journal(sandbox, "-t", "k25-ctl", "-p", "warning")
    assert any(f"run {run['id']}: ended failed" in line for line in warnings)
    assert not any(f"run {run['id']}: loading" in line for line in warnings)


def _served_model(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        return str(json.load(r)["data"][0]["id"])


def test_an_edited_profile_runs_exactly_as_its_run_recorded(api: Api, sandbox: SandboxInfo) -> None:
    path = Path(sandbox.dir) / "etc/profiles.d/fragile.toml"
    good = path.read_text()
    port = int(next(line for line in good.splitlines() if line.startswith("port = ")).split("=")[1])
    try:
        first = api.activate("fragile", force=True)
        assert first["outcome"] == "active"
        path.write_text(good.replace('"--served-model-name", "kimi-k2.5"', '"--served-model-name", "edit-2"'))
        second = api.activate("fragile", force=True)
        assert second["outcome"] == "active"
        assert "edit-2" in second["argv"]
        assert second["profile_sha256"] != first["profile_sha256"]
        assert _served_model(port) == "edit-2"  # the engine runs what run `second` recorded
        # Edited again but not switched: a restart by hand still runs the recorded argv, and says so.
        path.write_text(good.replace('"--served-model-name", "kimi-k2.5"', '"--served-model-name", "edit-3"'))
        assert inside(sandbox, "systemctl", "restart", "k25-engine@fragile.service").returncode == 0
        api.wait_until(lambda: _served_model(port) == "edit-2", what="engine back up")
        inside(sandbox, "journalctl", "--sync")
        engine = "\n".join(_journal(sandbox, "-t", "k25-engine-fragile"))
        assert f"changed since run {second['id']} recorded it" in engine
    finally:
        path.write_text(good)
    assert api.activate("baseline", force=True)["outcome"] == "active"


def test_systemctl_reload_rereads_the_profiles(api: Api, sandbox: SandboxInfo) -> None:
    folder = Path(sandbox.dir) / "etc/profiles.d"
    text = (folder / "fragile.toml").read_text()
    port = next(line for line in text.splitlines() if line.startswith("port = "))
    (folder / "added.toml").write_text(text.replace(port, "port = 1"))  # valid, on a port nobody uses
    (folder / "typo.toml").write_text(text.replace(port, port + "\nbogus = 1"))
    try:
        assert inside(sandbox, "systemctl", "reload", "k25-ctl.service").returncode == 0

        def reloaded() -> dict[str, bool] | None:
            seen = {p["name"]: p["valid"] for p in api.client.get("/profiles").json()}
            return {n: seen[n] for n in ("added", "typo")} if "added" in seen else None

        names = api.wait_until(reloaded, what="profiles reloaded")
        assert names == {"added": True, "typo": False}
        inside(sandbox, "journalctl", "--sync")
        daemon = "\n".join(_journal(sandbox, "-t", "k25-ctl"))
        assert "typo.toml: key 'bogus': unknown key" in daemon
        assert "reload: " in daemon
        assert inside(sandbox, "systemctl", "is-active", "k25-ctl.service").stdout.strip() == "active"
    finally:
        (folder / "added.toml").unlink()
        (folder / "typo.toml").unlink()
        api.client.post("/profiles/reload")
