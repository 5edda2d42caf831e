"""The REST contract, the CLI and `systemctl status k25-ctl`, against the daemon in the sandbox."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api, inside

K25 = str(Path(sys.executable).parent / "k25-ctl")


def test_curl_activate_then_sse_to_active(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    curl = subprocess.run(
        ["curl", "-s", "-i", "-X", "POST", "-H", f"Authorization: Bearer {sandbox.token}",
         f"{sandbox.url}/profiles/sglang-eagle3/activate"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    head, _, body = curl.stdout.partition("\n\n")  # text mode turned \r\n into \n
    assert head.startswith("HTTP/1.1 202")
    run_id = json.loads(body)["run_id"]
    assert f"location: /runs/{run_id}" in head.lower()
    phases = []
    with httpx.stream("GET", f"{sandbox.url}/runs/{run_id}/events", timeout=httpx.Timeout(30, read=120)) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data:"):
                phases.append(json.loads(line[5:])["phase"])
    assert phases[0] == "draining"  # the serving baseline drains before it is stopped
    assert phases[phases.index("stop") - 1] == "draining"
    assert phases[-1] == "active"
    assert {"teardown", "start", "loading", "probing"} <= set(phases)
    status = inside(sandbox, "systemctl", "status", "--no-pager", "k25-ctl.service").stdout
    assert 'Status: "active: sglang-eagle3 (ready' in status


def test_metrics_parse_with_prometheus_client(api: Api, sandbox: SandboxInfo) -> None:
    text = httpx.get(f"{sandbox.url}/metrics", timeout=10).text
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip
    active = api.status()["active_profile"]
    assert samples[("k25_host_state", (("state", "active"),))] == 1.0
    assert samples[("k25_active_profile", (("profile", active),))] == 1.0
    assert samples[("k25_load_seconds", (("profile", active),))] > 0
    assert ("k25_gpu_memory_used_mib", (("gpu", "0"),)) in samples
    assert any(name == "k25_runs_total" for name, _ in samples)


def _cli(sandbox: SandboxInfo, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"K25_CONFIG": sandbox.config, "PATH": "/usr/bin:/bin"}
    return subprocess.run([K25, *args], capture_output=True, text=True, timeout=180, env=env)


def test_cli_activate_wait_and_exit_codes(api: Api, sandbox: SandboxInfo) -> None:
    r = _cli(sandbox, "activate", "vllm-eagle3", "--wait", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    for phase in ("stop", "teardown", "start", "loading", "probing", "active"):
        assert phase in r.stdout
    assert (
        len({line.split("]")[1].split("%")[0] for line in r.stdout.splitlines() if "loading [" in line}) >= 3
    )
    r = _cli(sandbox, "activate", "crashy", "--wait")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "failed" in r.stdout
    api.wait_until(lambda: api.status()["state"] == "active", what="rollback after the failed switch")
    status = json.loads(_cli(sandbox, "status", "--json").stdout)
    assert status["active_profile"] == "vllm-eagle3"
    # The RAM ledger (issue 51): the serving engine's processes read after a GPU sample, then in words.
    api.wait_until(lambda: any(h["profile"] == "vllm-eagle3" for h in api.status()["ram_held"]),
                   what="the RAM ledger read the engine", within_s=60)  # fmt: skip
    assert re.search(r"^host RAM vllm-eagle3 \d+\.\d\d GiB", _cli(sandbox, "status").stdout, re.M)
    same = _cli(sandbox, "activate", "vllm-eagle3", "--dry-run")
    assert (same.returncode, same.stdout.strip()) == (
        0,
        "would not switch: vllm-eagle3 is already active and healthy",
    )
    other = _cli(sandbox, "activate", "baseline", "--dry-run", "--no-drain")
    assert other.returncode == 0, other.stdout + other.stderr
    assert other.stdout.startswith("would switch: vllm-eagle3 would stop, baseline would cold start"), (
        other.stdout
    )
    started = _cli(sandbox, "activate", "slow", "--json")
    assert started.returncode == 0
    run_id = json.loads(started.stdout)["run_id"]
    busy = _cli(sandbox, "activate", "baseline")
    assert busy.returncode == 4
    assert f"run {run_id}" in busy.stderr
    planned = _cli(sandbox, "activate", "baseline", "--dry-run")  # what it would do: refused, run N
    assert planned.returncode == 4, planned.stdout + planned.stderr
    assert f"would not switch: run {run_id}" in planned.stdout
    assert _cli(sandbox, "cancel", str(run_id)).returncode == 0
    api.wait_run(run_id)
    assert _cli(sandbox, "activate", "no-such-profile").returncode == 2
    runs = json.loads(_cli(sandbox, "runs", "--json", "--limit", "3").stdout)
    assert runs[0]["id"] >= run_id
    shown = _cli(sandbox, "run", str(run_id))
    assert shown.returncode == 3  # a cancelled run
    assert "cancelled" in shown.stdout
    plan = _cli(sandbox, "teardown", "--dry-run")
    assert plan.returncode == 0
    assert "victims" in plan.stdout
    api.wait_until(lambda: api.status()["state"] == "active", what="rollback after the cancel")


def test_daemon_restart_leaves_the_engine_serving(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
    engine_pid = inside(
        sandbox, "systemctl", "show", "-p", "MainPID", "--value", "vllm-kimi-k25-int4.service"
    ).stdout
    r = inside(
        sandbox, "systemctl", "restart", "k25-ctl.service"
    )  # SIGTERM, then a fresh daemon (Type=notify)
    assert r.returncode == 0, r.stderr
    after = inside(
        sandbox, "systemctl", "show", "-p", "MainPID", "--value", "vllm-kimi-k25-int4.service"
    ).stdout
    assert after == engine_pid
    status = api.status()
    assert (status["state"], status["active_profile"]) == ("active", "baseline")
    # The serving run carries on across the daemon's restart (not interrupted, not a new one).
    assert status["serving_run_id"] == serving
    run = api.run(serving)
    assert run["outcome"] == "running"
    assert "followed again after a daemon restart" in [e["detail"] for e in run["events"]]


def test_without_an_install_the_cli_talks_to_the_running_sandbox(
    api: Api, sandbox: SandboxInfo, tmp_path: Path
) -> None:
    """A new user's first command after the demo: no /etc/k25-ctl here and no K25_CONFIG, so the CLI finds
    the running sandbox and uses its token (it answered 401 before). An installed host never does this."""
    assert not Path("/etc/k25-ctl/k25-ctl.toml").exists()  # this machine has no install
    # The sandboxes' home as the demo leaves it: this one sandbox (other workers' sandboxes live in the
    # real one, and the CLI takes the newest there).
    home = tmp_path / "sandboxes"
    (home / sandbox.name).mkdir(parents=True)
    (home / sandbox.name / "sandbox.json").symlink_to(Path(sandbox.dir) / "sandbox.json")
    env = {"PATH": "/usr/bin:/bin", "K25_SANDBOX_HOME": str(home)}
    r = subprocess.run([K25, "status"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (
        f"k25-ctl: no install here (/etc/k25-ctl/k25-ctl.toml): talking to sandbox {sandbox.name}" in r.stderr
    )
    assert r.stdout.startswith("state ")
    # A mutating call carries the sandbox's token: refused for what it asks (no such run), not for a 401.
    r = subprocess.run([K25, "cancel", "999999"], capture_output=True, text=True, timeout=60, env=env)
    assert "bearer token" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "no run 999999" in r.stdout + r.stderr  # 404, as GET /runs/999999 (issue 49)
