"""GPU health end to end in a sandbox of its own: each fault the driver reports (an Xid through NVML's
event path or the kernel log, ECC and remapped rows, a lost GPU, a slowdown, a narrower PCIe link) is
injected into the simulated GPUs (k25_sandbox/gpu_faults.py) and must show, within 2 s, as the state
NVIDIA's catalog gives it, with the run's text, the journal line and the metric; a GPU that needs a
reset takes no engine, whoever asks; a holder stuck in the driver (a real process in D state, frozen by
the cgroup v1 freezer: SIGKILL cannot end it) marks only its GPUs; a reset clears them; doctor names each
broken condition with its fix."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from k25_sandbox import gpu_faults as gf
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.sandboxing import Api, inside
from tests.waiting import eventually_sync

DETECT_S = 2.0  # the acceptance's bound from injection to the state
BASELINE_UNIT = "vllm-kimi-k25-int4.service"
FREEZER = Path("/sys/fs/cgroup/freezer")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sbx.SandboxInfo, Api]]:
    extra = tmp_path_factory.mktemp("gpu-profiles")
    models = tmp_path_factory.mktemp("models")
    make_models(models)
    # A profile on GPUs 2 and 3 only: a holder stuck on GPU 3 must mark GPU 3, not its neighbours.
    pair = fake_engine_profile(
        "pair",
        flavor="vllm",
        port=free_port(),
        models=models,
        load_seconds=0.5,
        settings={"gpus": "[2, 3]"},
    )
    (extra / "pair.toml").write_text(pair.replace("tensor_parallel_size = 8", "tensor_parallel_size = 2"))
    info = sbx.up(profiles=extra, load_seconds=0.5, binds=(models,))
    yield info, Api(info)
    sbx.down(info)


@pytest.fixture(autouse=True)
def clean_gpus(host: tuple[sbx.SandboxInfo, Api]) -> Iterator[None]:
    """Each test starts from healthy GPUs, whatever the one before left (a failure must not cascade)."""
    yield
    info, api = host
    gf.clear(_dir(info))
    if any(g["state"] != "healthy" for g in api.status()["gpu_health"]):
        api.client.post("/gpus/ack", json={"note": "test cleanup"})
    api.wait_until(lambda: all(g["state"] == "healthy" for g in api.status()["gpu_health"]), what="healthy")


def _dir(info: sbx.SandboxInfo) -> Path:
    return Path(info.dir) / "dev/health"


def _gpu(api: Api, index: int) -> Any:
    return next(g for g in api.client.get("/gpus").json()["gpus"] if g["index"] == index)


def _state(api: Api, index: int) -> str:
    return str(next(g["state"] for g in api.status()["gpu_health"] if g["index"] == index))


def _until_state(api: Api, index: int, state: str, since: float) -> float:
    """Seconds from `since` until GPU `index` reads `state` in /status; fails past DETECT_S (plus slack
    for reading /status itself on a loaded machine: the state's own time is asserted by the daemon's log)."""
    api.wait_until(lambda: _state(api, index) == state, within_s=15, what=f"GPU {index} {state}")
    took = time.monotonic() - since
    assert took <= DETECT_S, f"GPU {index} read {state} {took:.2f}s after the injection"
    return took


def _journal(info: sbx.SandboxInfo, needle: str) -> str:
    out = inside(info, "journalctl", "-u", "k25-ctl", "--no-pager", "-o", "cat").stdout
    found = [line for line in out.splitlines() if needle in line]
    assert found, f"no journal line with {needle!r}"
    return found[-1]


def _metric(info: sbx.SandboxInfo, series: str) -> float | None:
    for line in httpx.get(f"{info.url}/metrics", timeout=30).text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


def _kernel_xid(info: sbx.SandboxInfo, gpu: int, code: int, message: str, pid: int | None = None) -> None:
    r = inside(info, *gf.kernel_argv(gf.xid_line(gpu, code, message, pid=pid)))
    assert r.returncode == 0, r.stderr


def _ack(api: Api, gpus: list[int]) -> None:
    r = api.client.post("/gpus/ack", json={"gpus": gpus, "note": "test cleanup"})
    assert r.status_code == 202, r.text
    api.wait_until(lambda: all(_state(api, g) == "healthy" for g in gpus), what="healthy again")


def test_xid_79_while_serving_is_attributed_and_no_policy_starts_an_engine_on_the_gpu(
    host: tuple[sbx.SandboxInfo, Api],
) -> None:
    info, api = host
    api.activate("baseline", force=True)
    serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
    began = time.monotonic()
    # The driver's view of a GPU that fell off the bus: the Xid line, NVML losing it, the engine dying.
    _kernel_xid(info, 3, 79, "GPU has fallen off the bus.", pid=4242)
    gf.set_fault(_dir(info), 3, lost=True)
    assert inside(info, "systemctl", "kill", "-s", "KILL", BASELINE_UNIT).returncode == 0
    took = _until_state(api, 3, "needs_reset", began)
    crashed = api.wait_run(serving)
    assert crashed["outcome"] == "crashed"
    assert "Xid 79 on GPU 3 at " in crashed["error"], crashed["error"]
    assert "GPU has fallen off the bus; NVIDIA's action: reboot the machine" in crashed["error"]
    line = _journal(info, "GPU 3: Xid 79 (kernel, pid 4242)")
    assert "the GPU is now needs_reset" in line, line
    assert _metric(info, 'k25_gpu_xid_total{gpu="3",xid="79"}') == 1.0
    assert _metric(info, 'k25_gpu_health{gpu="3",state="needs_reset"}') == 1.0
    api.wait_until(lambda: _metric(info, 'k25_gpu_lost{gpu="3"}') == 1.0, within_s=5, what="GPU 3 lost")
    # The default profile's policy is restart: past its first backoff it is refused, and no engine runs.
    refused = api.wait_until(
        lambda: "GPU 3 needs a reset" in _journal(info, "on_failure of baseline failed to start"),
        what="the restart refused",
    )
    assert refused
    assert inside(info, "systemctl", "is-active", BASELINE_UNIT).stdout.strip() != "active"
    runs = api.client.get("/runs", params={"limit": 20}).json()
    assert not [r for r in runs if r["parent_id"] == serving and r["kind"] == "switch"], runs
    # By hand: 409 with the reason, unless forced.
    r = api.client.post("/profiles/baseline/activate")
    assert r.status_code == 409, r.text
    assert "GPU 3 needs a reset" in r.text, r.text
    _promtool_pages(info)
    print(f"Xid 79 -> GPU 3 needs_reset in {took:.2f}s")

    # The reset, through the CLI and the fake command: plan, teardown, reset, readings clean.
    out = inside(info, sys.executable, "-m", "daemon.cli", "gpus", "reset")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reset GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in out.stdout, out.stdout
    assert "gpu_faults.py reset" in out.stdout, out.stdout
    assert all(g["state"] == "healthy" for g in api.status()["gpu_health"])
    reset_run = api.client.get("/runs", params={"limit": 1}).json()[0]
    assert (reset_run["kind"], reset_run["outcome"]) == ("gpu_reset", "ok"), reset_run
    assert api.activate("baseline")["outcome"] == "active"


def _promtool_pages(info: sbx.SandboxInfo) -> None:
    """The alert rules' own unit test of a GPU that needs a reset, fed the value this daemon exports now
    for host h1: promtool must see K25GpuNeedsReset fire there."""
    import yaml

    value = _metric(info, 'k25_gpu_health{gpu="3",state="needs_reset"}')
    rules = Path(__file__).resolve().parents[2] / "contrib/prometheus"
    suite = yaml.safe_load((rules / "k25-ctl.rules.test.yml").read_text())
    case = next(t for t in suite["tests"] if t["name"].startswith("a GPU that needs a reset"))
    for series in case["input_series"]:
        if 'instance="h1", gpu="3"' in series["series"]:
            series["values"] = f"0 {value:g} {value:g}"
    suite |= {"tests": [case], "rule_files": [str(rules / "k25-ctl.rules.yml")]}
    path = Path(info.dir) / "gpu-alert.test.yml"
    path.write_text(yaml.safe_dump(suite))
    out = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stdout + out.stderr


# (how it is injected, Xid or reading, expected state, words the reason has)
FAULTS = [
    ("nvml", 48, "needs_reset", "double-bit ECC error; NVIDIA's action: follow NVIDIA's workflow"),
    ("nvml", 95, "needs_reset", "uncontained memory error; NVIDIA's action: reset the GPU"),
    ("kernel", 94, "degraded", "contained memory error; NVIDIA's action: restart the application"),
    ("remap", 63, "degraded", "a row remap is pending"),
    ("lost", 0, "needs_reset", "GPU lost"),
    ("thermal", 0, "degraded", "clocks slowed: hw thermal"),
    ("pcie", 0, "degraded", "PCIe link x8, below its x16"),
]


@pytest.mark.parametrize(("how", "code", "state", "words"), FAULTS, ids=[f"{f[0]}-{f[1]}" for f in FAULTS])
def test_each_fault_gets_the_state_nvidia_gives_it(
    host: tuple[sbx.SandboxInfo, Api], how: str, code: int, state: str, words: str
) -> None:
    info, api = host
    gpu, d = 5, _dir(info)
    if api.status()["state"] != "active":
        api.activate("baseline")
    began = time.monotonic()
    if how == "nvml":
        gf.xid_event(d, gpu, code, pid=777)
    elif how == "kernel":
        _kernel_xid(info, gpu, code, "Contained: SM (0x1). RST: No, D-RST: No")
    elif how == "remap":
        gf.set_fault(d, gpu, values={"remap_pending": True, "remapped_correctable": 1})
        gf.xid_event(d, gpu, 63)
    elif how == "lost":
        gf.set_fault(d, gpu, lost=True)
    elif how == "thermal":
        gf.set_fault(d, gpu, slowdowns=["hw_thermal"])
    else:
        gf.set_fault(d, gpu, values={"pcie_width": 8})
    took = _until_state(api, gpu, state, began)
    g = _gpu(api, gpu)
    assert any(words in r for r in g["reasons"]), g["reasons"]
    assert _metric(info, f'k25_gpu_health{{gpu="{gpu}",state="{state}"}}') == 1.0
    if code:
        assert _metric(info, f'k25_gpu_xid_total{{gpu="{gpu}",xid="{code}"}}') is not None
        _journal(info, f"GPU {gpu}: Xid {code} ({'kernel' if how == 'kernel' else 'nvml'}")
    change = _journal(info, f"GPU {gpu}: healthy -> {state} (")  # one line per change of state
    assert words in change, change
    if state == "degraded":  # a warning: the engine serves on
        assert api.status()["state"] == "active"
    print(f"{how} {code}: GPU {gpu} {state} in {took:.2f}s")
    gf.clear(d, [gpu])
    _ack(api, [gpu])


@pytest.mark.parametrize("code", [13, 31, 43])
def test_application_xids_are_recorded_and_change_nothing(
    host: tuple[sbx.SandboxInfo, Api], code: int
) -> None:
    info, api = host
    _kernel_xid(info, 6, code, "Graphics Exception", pid=999)
    api.wait_until(
        lambda: any(e["code"] == code for e in _gpu(api, 6)["events"]), what=f"Xid {code} recorded"
    )
    line = _journal(info, f"GPU 6: Xid {code} (kernel, pid 999)")
    assert "recorded, no change to its health" in line, line
    assert _state(api, 6) == "healthy"


def test_a_reset_with_a_foreign_holder_is_refused_naming_it(host: tuple[sbx.SandboxInfo, Api]) -> None:
    info, api = host
    dev = Path(info.dir) / "dev/nvidia5"
    holder = subprocess.Popen(  # a process k25-ctl does not manage, with GPU 5 mapped
        info.inside([sys.executable, "-c", _HOLD.format(dev=dev)]), stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "holding"
        r = api.client.post("/gpus/reset", json={"gpus": [5]})
        assert r.status_code == 409, r.text
        assert "a process k25-ctl does not manage holds the GPUs: pid" in r.text, r.text
        plan = api.client.post("/gpus/reset/plan", json={}).json()
        assert any(h["foreign"] and 5 in h["gpus"] for h in plan["holders"]), plan
    finally:
        holder.kill()
        holder.wait(10)


_HOLD = (
    "import mmap, sys, time; f = open('{dev}', 'r+b'); m = mmap.mmap(f.fileno(), 4096); "
    "print('holding', flush=True); time.sleep(600)"
)


@contextmanager
def _frozen(pids: list[int]) -> Iterator[None]:
    """The processes frozen by the cgroup v1 freezer: state D (in __refrigerator), deaf to SIGKILL until
    thawed. Thawed on the way out, whatever happened (a pending SIGKILL then ends them)."""
    group = FREEZER / f"k25-test-{os.getpid()}"
    home = _freezer_of(pids[0])  # the sandbox's own group: what is left goes back there
    group.mkdir()
    try:
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
        (group / "freezer.state").write_text("FROZEN")
        eventually_sync(  # FREEZING until every task has stopped
            lambda: (group / "freezer.state").read_text().strip() == "FROZEN", what="frozen", within_s=10
        )
        yield
    finally:
        (group / "freezer.state").write_text("THAWED")
        eventually_sync(lambda: _emptied(group, home), what="the freezer group removed", within_s=10)


def _freezer_of(pid: int) -> Path:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(","):
            return FREEZER / path.lstrip("/")
    return FREEZER


def _emptied(group: Path, home: Path) -> bool:
    """Move what is left (a thawed process may still be on its way out) back to its own group, then
    remove ours; False while the kernel still counts a task in it."""
    for left in (group / "cgroup.procs").read_text().split():
        with contextlib.suppress(OSError):  # it exited meanwhile
            (home / "cgroup.procs").write_text(left)
    try:
        group.rmdir()
    except OSError:
        return False
    return True


def _holders(info: sbx.SandboxInfo, device: Path) -> list[int]:
    """The sandbox's processes (this machine's PIDs) that map `device`."""
    ns = Path(f"/proc/{info.pid}/ns/pid").readlink()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "ns/pid").readlink() == ns and str(device) in (proc / "maps").read_text():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not (FREEZER / "cgroup.procs").exists(), reason="no cgroup v1 freezer on this kernel")
def test_a_holder_stuck_in_d_state_marks_only_its_gpus_and_a_reset_clears_them(
    host: tuple[sbx.SandboxInfo, Api],
) -> None:
    info, api = host
    api.activate("pair")
    stuck = _holders(info, Path(info.dir) / "dev/nvidia3")
    assert stuck, "the pair engine's GPU 3 worker"
    with _frozen(stuck):
        assert Path(f"/proc/{stuck[0]}/stat").read_text().split(") ")[1][0] == "D"
        run = api.activate("baseline", expect=None)
        assert run["outcome"] == "failed", run
        assert "survived SIGKILL in state D" in (run["error"] or ""), run["error"]
        api.wait_until(lambda: _state(api, 3) == "needs_reset", what="GPU 3 needs a reset")
        states = {g["index"]: g["state"] for g in api.status()["gpu_health"]}
        assert [i for i, s in states.items() if s != "healthy"] == [3], states
        assert "wchan __refrigerator" in _gpu(api, 3)["reasons"][0]
        assert api.status()["state"] == "needs_reset"
    # Thawed, the process takes its SIGKILL; the reset then verifies the GPUs and clears the mark.
    r = api.client.post("/gpus/reset", json={})
    assert r.status_code == 202, r.text
    done = api.wait_run(r.json()["run_id"])
    assert done["outcome"] == "ok", done
    assert api.status()["state"] == "idle"
    assert api.activate("baseline")["outcome"] == "active"


def test_doctor_passes_then_names_each_broken_condition_with_its_fix(
    host: tuple[sbx.SandboxInfo, Api],
) -> None:
    info, api = host
    d = _dir(info)
    ok = inside(info, sys.executable, "-m", "daemon.cli", "doctor")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.strip().endswith("ready"), ok.stdout
    gf.set_modes(d, modes={"persistence": False, "ecc": False, "mig": True}, gpu_count=7)
    gf.set_fault(d, 1, values={"pcie_width": 4, "nvlink_up": 16})
    try:
        out = inside(info, sys.executable, "-m", "daemon.cli", "doctor", "--json")
        assert out.returncode == 3, out.stdout + out.stderr
        import json

        checks = {c["name"]: c for c in json.loads(out.stdout)["checks"]}
        expect = {
            "gpu count": ("fail", "7 GPUs seen, 8 expected", "fell off the bus"),
            "persistence mode": ("warn", "GPU 0 off", "nvidia-smi -pm 1"),
            "ECC": ("fail", "GPU 0 off", "nvidia-smi -e 1"),
            "MIG": ("fail", "GPU 0 in MIG mode", "nvidia-smi -mig 0"),
            "PCIe": ("warn", "GPU 1 x4 of x16", "reseat"),
            "NVLink": ("fail", "GPU 1: 16 of 18 links up", "nvidia-smi nvlink -s"),
        }
        for name, (status, detail, fix) in expect.items():
            c = checks[name]
            assert (c["status"], detail in c["detail"], fix in c["fix"]) == (status, True, True), c
        for name in ("driver", "/dev/shm", "engines installed", "ports", "memlock"):
            assert checks[name]["status"] == "pass", checks[name]
    finally:
        (d / "host.json").unlink()
        gf.clear(d, [1])
        api.wait_until(lambda: _state(api, 1) == "healthy", what="GPU 1 healthy")


def test_marks_outlive_a_daemon_restart_and_automatic_resets_answer_reset_gpu_xids_only(
    host: tuple[sbx.SandboxInfo, Api],
) -> None:
    """A GPU that needs a reset still does after the daemon restarts (the marks are in the database).
    gpu_reset_automatic (off by default, on here from that restart): Xid 95, whose action is RESET_GPU,
    starts a reset run by itself; Xid 79 (reboot the machine) waited for a person."""
    info, api = host
    gf.xid_event(_dir(info), 1, 79)
    api.wait_until(lambda: _state(api, 1) == "needs_reset", what="GPU 1 needs a reset")
    config = Path(info.config)
    config.write_text("gpu_reset_automatic = true\n" + config.read_text())  # top level, before any table
    assert inside(info, "systemctl", "restart", "k25-ctl").returncode == 0
    api.wait_until(lambda: api.client.get("/gpus").json()["events"].startswith("simulated"), what="restarted")
    assert _state(api, 1) == "needs_reset"
    assert "Xid 79, GPU has fallen off the bus" in _gpu(api, 1)["reasons"][0]
    assert not [r for r in api.client.get("/runs", params={"limit": 5}).json() if r["kind"] == "gpu_reset"
                and r["outcome"] == "running"]  # fmt: skip
    before = api.client.get("/runs", params={"limit": 1}).json()[0]["id"]
    gf.xid_event(_dir(info), 6, 95)

    def reset_run() -> Any:
        runs = api.client.get("/runs", params={"limit": 5}).json()
        return next(
            (r for r in runs if r["kind"] == "gpu_reset" and r["id"] > before and r["outcome"] == "ok"), None
        )

    reset = api.wait_until(reset_run, what="the automatic reset")
    line = _journal(info, "reset automatically after Xid 95")
    assert f"run {reset['id']}: GPU 6" in line, line
    # The board's reset (gpu_reset_scope board): every GPU read clean again, GPU 1's mark cleared with it.
    api.wait_until(lambda: all(g["state"] == "healthy" for g in api.status()["gpu_health"]), what="healthy")
