"""What a sandbox's temp dir holds: the unit path (minimal targets, dbus, journald, the project's own units
rendered with sandbox paths), the daemon's config, token and profiles, fake GPU device files and models."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from daemon.core.profiles import engine_unit
from daemon.engines import ENGINES
from k25_sandbox import fake_install
from k25_sandbox.ports import free_port
from k25_sandbox.units import write_units

GPU_COUNT = 8


# The stock sandbox profiles: the real deployment's three, served by the fake engine.
@dataclass(frozen=True)
class FakeServing:
    """How the fake engine serves a stock profile: flavor, token rate, drafts (k, acceptance)."""

    flavor: str
    rate: float
    spec: dict[str, float] | None = None
    unit: str | None = None


SANDBOX_PROFILES = {
    "baseline": FakeServing("vllm", 82.5, unit="vllm-kimi-k25-int4.service"),
    "vllm-eagle3": FakeServing("vllm", 54.6, {"k": 3, "acceptance": 0.15}),
    # 1.8x the baseline, accept length 1 + 3 x 0.6 = 2.8
    "sglang-eagle3": FakeServing("sglang", 148.5, {"k": 3, "acceptance": 0.6}),
}


def fake_engine_profile(
    name: str,
    *,
    flavor: str,
    port: int,
    models: Path,
    load_seconds: float,
    rate: float = 80.0,
    spec: dict[str, float] | None = None,
    unit: str | None = None,
    faults: tuple[str, ...] = (),
    fault_after: int | None = None,
    probe_timeout_s: float = 10.0,
    settings: dict[str, str] | None = None,
    weights: Path | None = None,
    park: str | None = None,
    wake_gbps: float | None = None,
    engine_args: tuple[str, ...] = (),
    park_flags: tuple[str, ...] | None = None,
) -> str:
    """A profile served by the fake engine (an ordinary profile: engine vllm or sglang plus `command`).
    `weights`: the model folder, read by the engine as a lazy mmap loader does. `park`: the profile parks
    ("sleep" | "release") and the engine serves its flavour's sleep/wake endpoints, enabled by the flags
    k25-ctl renders for the engine (`park_flags`: others, e.g. too few). `engine_args`: more
    fake engine flags (--draft-cost, --position-acceptance)."""
    model = weights or models / "Kimi-K2.5-INT4"
    command = [
        sys.executable,
        "-m",
        "k25_sandbox.fake_engine",
        "--flavor",
        flavor,
        fake_install.ENTRY[flavor],
    ]
    command += ["--port", "{port}"]
    command += ["--served-model-name", "kimi-k2.5", "--model", str(model)]
    command += ["--load-seconds", str(load_seconds), "--rate", str(rate)]
    if spec:
        command += ["--spec-tokens", str(int(spec["k"])), "--acceptance", str(spec["acceptance"])]
    if weights is not None:
        command += ["--weights", str(weights)]
    command += [arg for fault in faults for arg in ("--fault", fault)]
    if fault_after is not None:
        command += ["--fault-after", str(fault_after)]
    if park is not None:
        flags = list(park_flags if park_flags is not None else ENGINES[flavor].park_flag_reasons)
        command += flags + (["--wake-gbps", str(wake_gbps)] if wake_gbps else [])
    command += engine_args
    lines = profile_head(
        f"{name} (fake {flavor} engine in the sandbox)", flavor, model, port, probe_timeout_s
    )
    if unit:
        lines.append(f'unit = "{unit}"')
    if park is not None:
        lines.append(f'park = "{park}"')
    lines += [f"{key} = {value}" for key, value in (settings or {}).items()]  # values as TOML text
    lines.append(f"command = {json.dumps(command)}")
    if spec:
        lines += speculative_table(models, int(spec["k"]))
    if models.exists():  # (not a folder of another machine) its package's metadata: its version
        installed = fake_install.folder_for(models, flavor)
        lines += ["", "[environment]", f"PYTHONPATH = {json.dumps(str(installed))}"]
    return "\n".join(lines) + "\n"


def profile_head(description: str, flavor: str, model: Path, port: int, probe_timeout_s: float) -> list[str]:
    """The first keys of a sandbox profile file: the fake engines serve Kimi-K2.5 on 8 GPUs."""
    return [
        f'description = "{description}"',
        f'engine = "{flavor}"',
        f'model = "{model}"',
        'served_model_name = "kimi-k2.5"',
        f"port = {port}",
        "tensor_parallel_size = 8",
        "load_timeout_s = 120",
        f"probe_timeout_s = {probe_timeout_s}",
    ]


def speculative_table(models: Path, k: int) -> list[str]:
    """An EAGLE-3 drafter (from the models folder) proposing k tokens."""
    draft = models / "Kimi-K2.5-EAGLE3"
    return [
        "",
        "[speculative]",
        'method = "eagle3"',
        f'draft_model = "{draft}"',
        f"num_speculative_tokens = {k}",
    ]


WEIGHT_FILES = 4


def make_weights(folder: Path, file_mib: int) -> list[Path]:
    """A model folder of real files (random bytes: nothing compresses or dedups them); kept if there."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"architectures": ["FakeForCausalLM"]}')
    files = []
    for i in range(WEIGHT_FILES):
        f = folder / f"model-{i + 1:05d}-of-{WEIGHT_FILES:05d}.safetensors"
        if not f.exists() or f.stat().st_size != file_mib * 2**20:
            tmp = f.with_suffix(".partial")
            with tmp.open("wb") as out:
                for _ in range(file_mib):
                    out.write(os.urandom(2**20))
            tmp.replace(f)
        files.append(f)
    return files


def make_models(models: Path) -> None:
    for d in ("Kimi-K2.5-INT4", "Kimi-K2.5-EAGLE3"):
        (models / d).mkdir(parents=True, exist_ok=True)


def write_tree(
    root: Path,
    *,
    port: int,
    extra_profiles: Path | None,
    load_seconds: float,
    settings: dict[str, str] | None = None,
    binds: tuple[Path, ...] = (),
    weights: Path | None = None,
    parks: tuple[str, ...] = (),
) -> dict[str, int]:
    """Everything but the boot script; returns the engine ports it allocated. `weights`: the stock profiles'
    model folder, of real files their fake engines read (residency, warming and the load's weights stage
    then show something real). `parks`: the stock profiles that park."""
    if unknown := set(parks) - set(SANDBOX_PROFILES):
        raise ValueError(f"no stock profile {sorted(unknown)} to park (stock: {sorted(SANDBOX_PROFILES)})")
    etc, state, dev = root / "etc", root / "state", root / "dev"
    for d in (
        etc / "profiles.d",
        state,
        dev,
        root / "models/Kimi-K2.5-INT4",
        root / "models/Kimi-K2.5-EAGLE3",
    ):
        d.mkdir(parents=True)
    for i in range(GPU_COUNT):
        (dev / f"nvidia{i}").write_bytes(b"\0" * 4096)
    (dev / "nvidiactl").write_bytes(b"\0" * 4096)
    (dev / "health").mkdir()  # the simulated GPUs' faults (k25_sandbox/gpu_faults.py)
    os.mkfifo(dev / "health/events", 0o600)  # their NVML event path (daemon/host/sim_health.py)
    for token in (etc / "token", etc / "capture-token"):  # the admin's, and the balancer's mirror's
        fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_urlsafe(32).encode() + b"\n")
        os.close(fd)
    ports = {}
    for name, fake in SANDBOX_PROFILES.items():
        ports[name] = free_port()
        text = fake_engine_profile(
            name,
            port=ports[name],
            models=root / "models",
            load_seconds=load_seconds,
            flavor=fake.flavor,
            rate=fake.rate,
            spec=fake.spec,
            unit=fake.unit,
            weights=weights,
            park=ENGINES[fake.flavor].park_mode if name in parks else None,
        )
        (etc / "profiles.d" / f"{name}.toml").write_text(text)
    if extra_profiles is not None:
        for f in sorted(extra_profiles.glob("*.toml")):
            shutil.copy(f, etc / "profiles.d" / f.name)
    config = etc / "k25-ctl.toml"
    values = _daemon_settings(root, port) | (settings or {})  # values as TOML text
    config.write_text("".join(f"{k} = {v}\n" for k, v in values.items()))
    write_units(root, config, (*binds, shared_cache(root)))
    _let_orphans_escape(etc / "profiles.d", root / "units")
    return ports


def _let_orphans_escape(profiles: Path, units: Path) -> None:
    """The fake `orphan` fault leaves its unit's cgroup, as an engine's orphan can where a unit allows it
    (or where an engine was started by hand): the engine units' ProtectControlGroups=yes forbids that, so
    these profiles' units get a drop-in that allows it; teardown must still find and kill the orphan."""
    for f in profiles.glob("*.toml"):
        if '"--fault", "orphan"' in f.read_text():
            drop_in = units / f"{engine_unit(f.stem)}.d"
            drop_in.mkdir(parents=True, exist_ok=True)
            (drop_in / "orphan-fault.conf").write_text("[Service]\nProtectControlGroups=no\n")


def shared_cache(root: Path) -> Path:
    """A folder every sandbox of this machine shares: what the fake engines said of their versions and
    flags is the same in each, so only the first sandbox asks them (each boot asked ~3 s of helps)."""
    folder = root.parent / "shared-cache"
    folder.mkdir(exist_ok=True)
    return folder


def _fakes_hash() -> str:
    """The fake engines' code: a change to it (a flag added) is a new cache, never a stale flag list."""
    here = Path(__file__).parent
    names = ("fake_engine.py", "fake_args.py", "fake_install.py")
    text = b"".join((here / name).read_bytes() for name in names)
    return hashlib.sha256(text).hexdigest()[:12]


def _daemon_settings(root: Path, port: int) -> dict[str, str]:
    """The sandbox daemon's settings (TOML values as text), at a test's pace where production waits."""
    etc, state, dev = root / "etc", root / "state", root / "dev"
    return {
        "config_dir": json.dumps(str(etc)),
        "state_dir": json.dumps(str(state)),
        "engines_cache": json.dumps(str(shared_cache(root) / f"engines-{_fakes_hash()}.json")),
        "engine_cache_dir": json.dumps(str(root / "engine-cache")),
        "gpu_backend": '"simulated"',
        "gpu_device_glob": json.dumps(f"{dev}/nvidia*"),
        "sim_gpu_count": str(GPU_COUNT),
        # The simulated GPUs' reset: clears their faults (k25_sandbox/gpu_faults.py, run as a script).
        "gpu_reset_command": json.dumps(
            [
                sys.executable,
                str(Path(__file__).with_name("gpu_faults.py")),
                "reset",
                "--dir",
                str(dev / "health"),
            ]
        ),
        "expected_gpus": str(GPU_COUNT),
        "bind_host": '"127.0.0.1"',
        "port": str(port),
        "term_grace_s": "5",
        # A drain at a test's pace (production: 5 s for the balancer to see /ready turn 503).
        "drain_grace_s": "0.2",
        "drain_poll_s": "0.1",
        "kill_grace_s": "5",
        "verify_timeout_s": "20",
        # The serving watch at a test's pace (production: 10 s, 120 s, 5 s).
        "watch_interval_s": "1",
        "stall_s": "4",
        "restart_backoff_s": "0.5",
        "store_retry_s": "0.5",
        # Parking pins fake weights of a few bytes: keep 256 MiB free, not production's 64 GiB.
        "park_ram_reserve_bytes": str(256 * 1024**2),
    }
