"""Rough edges a new user met (#22): an engine started by hand while it loads, a model under /tmp that the
daemon's PrivateTmp hides, the sandbox from a virtualenv under /tmp, and the demo's real weight files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile
from k25_sandbox.ports import free_port
from k25_sandbox.sandbox import SandboxInfo
from tests.conftest import ROOT
from tests.sandboxing import Api, inside, stop_engines

SPEC = {"concurrency": [1], "num_prompts": 2, "max_tokens": 32, "warmups": 0}


def _main_pid(sandbox: SandboxInfo, unit: str) -> int:
    return int(inside(sandbox, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip())


def test_an_engine_started_by_hand_while_it_loads_is_measured_in_place(
    api: Api, sandbox: SandboxInfo
) -> None:
    """A unit is active as soon as its process starts; the host is active once its engine answers. An
    experiment asked for meanwhile measures that engine when it is ready instead of starting it again."""
    stop_engines(sandbox)
    api.wait_until(lambda: api.status()["state"] == "idle", what="idle after the stop")
    unit = "k25-engine@slow.service"  # 8 s of loading
    assert inside(sandbox, "systemctl", "start", unit).returncode == 0
    pid = _main_pid(sandbox, unit)
    st = api.wait_until(lambda: "loading" in ((s := api.status())["reason"] or "") and s, what="followed")
    assert (st["state"], st["active_profile"]) == ("idle", None), st  # loading: not active, not unhealthy
    r = api.client.post("/experiments", json={"profiles": ["slow"], "benchmark": SPEC, "restore": False})
    assert r.status_code == 202, r.text
    exp_id = r.json()["run_id"]
    run = api.wait_run(exp_id, within_s=120)
    exp = api.client.get(f"/experiments/{exp_id}").json()
    assert run["outcome"] == "ok", exp
    step = exp["steps"][0]
    assert step["switch_run_id"] is None, step  # measured in place: no switch, no load
    assert step["outcomes"] == ["ok"]
    assert _main_pid(sandbox, unit) == pid
    kinds = [r["kind"] for r in api.client.get("/runs", params={"limit": 6}).json()]
    assert "switch" not in kinds, kinds
    assert "unhealthy" not in [e["phase"] for e in api.run(exp_id - 1)["events"]]  # its serving run
    api.activate("baseline")


def test_a_model_under_tmp_is_explained(api: Api, sandbox: SandboxInfo, tmp_path: Path) -> None:
    """The daemon's unit has PrivateTmp=yes: a model the operator sees under /tmp does not exist for it."""
    model = Path("/tmp") / f"k25-model-{os.getpid()}"
    model.mkdir(exist_ok=True)
    try:
        text = fake_engine_profile("in-tmp", flavor="vllm", port=free_port(), models=tmp_path, load_seconds=1)
        text = text.replace(f'model = "{tmp_path / "Kimi-K2.5-INT4"}"', f'model = "{model}"')
        profiles = Path(sandbox.dir) / "etc/profiles.d"
        (profiles / "in-tmp.toml").write_text(text)
        api.client.post("/profiles/reload")
        bad = next(p for p in api.client.get("/profiles").json() if p["name"] == "in-tmp")
        assert not bad["valid"]
        assert (
            f"model path {model} does not exist (not visible to k25-ctl.service: PrivateTmp hides"
            in bad["error"]
        )
        assert "BindReadOnlyPaths= drop-in" in bad["error"]
        # The operator's own check (where the path exists) says the same, as a warning.
        (profiles / "in-tmp.toml").rename(tmp_path / "in-tmp.toml")
        api.client.post("/profiles/reload")
        out = subprocess.run([sys.executable, "-m", "daemon.cli", "check-profiles", "--dir", str(tmp_path)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        assert f"WARNING  in-tmp: model: model path {model}: not visible to k25-ctl.service" in out.stdout, (
            out
        )
    finally:
        model.rmdir()


def _venv_under_tmp(where: Path) -> Path:
    """A virtualenv under /tmp (not the checkout's .venv) that has k25-ctl and its sandbox: its site-packages
    point at the checkout's environment, the checkout and its sandbox/ through a .pth file (a path there
    runs no editable install's hook); its k25-ctl script runs its own python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    site = next((where / "lib").glob("python3*/site-packages"))
    theirs = next((ROOT / ".venv/lib").glob("python3*/site-packages"))
    (site / "k25-checkout.pth").write_text(f"{theirs}\n{ROOT}\n{ROOT / 'sandbox'}\n")
    script = where / "bin/k25-ctl"
    script.write_text(
        f"#!{where}/bin/python\nimport sys\nfrom daemon.cli.main import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def test_sandbox_up_from_a_venv_under_tmp_with_demo_weights(tmp_path: Path) -> None:
    """`k25-ctl sandbox up` from a virtualenv under /tmp: the daemon's ExecStart sees its interpreter.
    `--weights`: the stock profiles read real files; `--activate` returns once the host is active."""
    venv = Path("/tmp") / f"k25-venv-{os.getpid()}"
    weights = tmp_path / "weights"
    k25 = _venv_under_tmp(venv)
    try:
        out = subprocess.run(
            [str(k25), "sandbox", "up", "--json", "--load-seconds", "1", "--weights", str(weights),
             "--activate", "baseline"],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        info = SandboxInfo(**{k: v for k, v in json.loads(out.stdout).items() if k != "alive"})
        try:
            client = httpx.Client(base_url=info.url, headers={"Authorization": f"Bearer {info.token}"})
            st = client.get("/status").json()
            assert (st["state"], st["active_profile"]) == ("active", "baseline"), st  # --activate waited
            exec_start = inside(info, "systemctl", "show", "-p", "ExecStart", "k25-ctl.service").stdout
            assert str(venv) in exec_start
            res = {p["name"]: p["residency"] for p in client.get("/profiles").json()}
            assert res["baseline"]["bytes"] >= 4 * 64 * 2**20, res  # the demo's real weight files
            assert res["baseline"]["percent"] > 99  # the engine read them as it loaded
            run = client.post("/profiles/sglang-eagle3/activate", params={"wait": True}, timeout=120).json()
            assert run["outcome"] == "active", run
            stages = {
                b["stage"]: b["seconds"] for b in client.get(f"/runs/{run['id']}").json()["load_breakdown"]
            }
            assert "weights" in stages, stages
        finally:
            sbx.down(info)
            assert sbx.leftovers(info) == []
    finally:
        subprocess.run(["rm", "-rf", str(venv)], check=True)
