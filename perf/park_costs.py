"""The park cost table on the sandbox (issue 51): fake vLLM engines with a host's pinning physics (each
worker pins at a per-process rate up to a host-wide ceiling, faster where the environment turns registered
pinning on, as torch reads it), launched with k25-ctl's rendered environment (registered) and with a
profile that turns it off (default), with 1 and 4 workers. For each: the first park, the wake, the second
park (the block kept: the copy alone) and the wake again, measured by the daemon beside the model's
prediction from the host's rates (written where `k25-ctl host calibrate` writes them). Prints the table,
the registered/default ratio of first parks measured in this run, and measured/predicted for each. Needs
root (the sandbox). Run by `python perf/park.py --costs`."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import httpx

from daemon.parking import rates
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port

GIB = 2**30
WEIGHT_MIB = 256
# A small host, scaled so the sandbox's 256 MiB of weights take visible time (GiB/s, as the model reads).
HOST = {
    "pin_process": 0.25,
    "pin_host": 0.6,
    "pin_process_registered": 1.0,
    "pin_host_registered": 1.6,
    "device_to_host": 50.0,
    "host_to_device": 1.0,
    "page_cache": 2.0,
    "disk": 0.5,
}
SAID = re.compile(r" in (?P<m>[\d.]+)s \(predicted (?P<p>[\d.]+)s: (?P<way>[^)]+\)?)\)")


def _gbps(gibps: float) -> str:
    return f"{gibps * GIB / 1e9:.6f}"  # the fake's flags are GB/s


def _profile(name: str, workers: int, registered: bool, models: Path, weights: Path) -> str:
    args: tuple[str, ...] = (
        "--pin-gbps",
        _gbps(HOST["pin_process"]),
        "--pin-host-gbps",
        _gbps(HOST["pin_host"]),
    )
    args += ("--pin-gbps-registered", _gbps(HOST["pin_process_registered"]))
    args += ("--pin-host-gbps-registered", _gbps(HOST["pin_host_registered"]))
    settings = (
        {}
        if registered
        else {"environment": '{PYTORCH_CUDA_ALLOC_CONF = "pinned_use_cuda_host_register:False"}'}
    )
    text = fake_engine_profile(name, flavor="vllm", port=free_port(), models=models, load_seconds=0.5,
                               park="sleep", weights=weights, wake_gbps=float(_gbps(workers * HOST["host_to_device"])),
                               engine_args=args, settings=settings)  # fmt: skip
    gpus = ", ".join(str(g) for g in range(workers))
    return text.replace("tensor_parallel_size = 8", f"tensor_parallel_size = {workers}\ngpus = [{gpus}]")


def _said(run: dict[str, Any], phase: str) -> tuple[float, float, str]:
    for e in run["events"]:
        if e["phase"] == phase and (m := SAID.search(e["detail"] or "")):
            return float(m["m"]), float(m["p"]), m["way"]
    raise SystemExit(f"run {run['id']} has no {phase} event with a prediction: {run['events']}")


def _cycle(c: httpx.Client, name: str) -> list[tuple[str, float, float, str]]:
    def go(to: str) -> dict[str, Any]:
        run: dict[str, Any] = c.post(f"/profiles/{to}/activate", params={"wait": True}).json()
        assert run.get("outcome") == "active", run
        return run

    go(name)
    rows = []
    for label in ("first park", "second park"):
        rows.append((label, *_said(go("vllm-eagle3"), "parking")))
        rows.append((f"wake after the {label}", *_said(go(name), "waking")))
    go("vllm-eagle3")  # parked once more, then stopped: the next profile starts on free GPUs
    assert c.post(f"/profiles/{name}/unpark").status_code == 200
    return rows


def costs() -> None:
    with tempfile.TemporaryDirectory(prefix="k25-park-costs-") as tmp:
        extra, models, weights = Path(tmp, "profiles"), Path(tmp, "models"), Path(tmp, "weights")
        for d in (extra, weights):
            d.mkdir()
        make_models(models)
        (weights / "model-00001-of-00001.safetensors").write_bytes(b"\1" * WEIGHT_MIB * 2**20)
        cases = {
            f"w{n}-{kind}": (n, kind == "registered") for n in (1, 4) for kind in ("default", "registered")
        }
        for name, (n, reg) in cases.items():
            (extra / f"{name}.toml").write_text(_profile(name, n, reg, models, weights))
        info = sbx.up(profiles=extra, load_seconds=0.5, binds=(models, weights))
        try:
            rates.save(Path(info.dir) / "state", HOST, python="perf/park_costs.py")
            c = httpx.Client(
                base_url=info.url, timeout=300, headers={"Authorization": f"Bearer {info.token}"}
            )
            table = {name: _cycle(c, name) for name in cases}
        finally:
            sbx.down(info)
    print(f"park costs on the sandbox: {WEIGHT_MIB} MiB of weights, host rates (GiB/s) {HOST}")
    print(f"{'profile':15} {'step':28} {'measured s':>10} {'predicted s':>11} {'ratio':>6}  way")
    for name, rows in table.items():
        for step, measured, predicted, way in rows:
            ratio = f"{measured / predicted:6.2f}" if predicted > 0 else "     -"
            print(f"{name:15} {step:28} {measured:10.2f} {predicted:11.2f} {ratio}  {way}")
    for n in (1, 4):
        slow, fast = table[f"w{n}-default"][0][1], table[f"w{n}-registered"][0][1]
        print(f"{n} worker(s): first park default {slow:.2f}s, registered {fast:.2f}s: {slow / fast:.2f}x")
