"""The fault profiles the system tests, the web tests and perf/soak.py add to a sandbox (each fault the fake
engine can show, on its own port), and running a command inside a sandbox."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from daemon.engines.answers import REQUESTS
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models, make_weights
from k25_sandbox.ports import free_port

# What a cold start asks before the host serves: the probe's generation, the known answer twice.
READY_REQUESTS = 1 + 2 * len(REQUESTS)
# Extra profiles the system tests need: each fault the fake engine can show, on its own port.
FAULT_PROFILES: dict[str, dict[str, Any]] = {
    "crashy": {"flavor": "vllm", "faults": ("crash-loading",)},
    "stubborn": {"flavor": "vllm", "faults": ("ignore-sigterm",)},
    "orphaner": {"flavor": "sglang", "faults": ("orphan",)},
    "leaky": {"flavor": "vllm", "faults": ("leak-shm",)},
    "deadlocked": {"flavor": "sglang", "faults": ("deadlock",), "probe_timeout_s": 3.0},
    "slow": {"flavor": "vllm", "load_seconds": 8.0},
    "fragile": {"flavor": "vllm"},
    # Faults that strike while serving (the probe and the known answer's requests, asked twice, come first).
    "late-crash": {"flavor": "vllm", "faults": ("crash-after-ready",), "fault_after": READY_REQUESTS + 1},
    "late-hang": {"flavor": "sglang", "faults": ("hang-after-ready",), "fault_after": READY_REQUESTS},
    "brittle": {"flavor": "vllm", "rate": 120.0, "settings": {"on_failure": '"none"'}},
    # Real weight files read like a lazy mmap loader, warmed into the page cache during the switch.
    "warmable": {"flavor": "vllm", "settings": {"warm": '"on-switch"'}, "weights": "warm-weights"},
    # Sweeps: drafting costs time (a step of k drafts takes 1 + 0.25 k token times), so the best number of
    # speculative tokens depends on the acceptance; `drafty`'s drafter has known per-position rates.
    "sweepy": {
        "flavor": "vllm",
        "rate": 80.0,
        "spec": {"k": 3, "acceptance": 0.6},
        "engine_args": ("--draft-cost", "0.25"),
    },
    "drafty": {
        "flavor": "vllm",
        "rate": 80.0,
        "spec": {"k": 3, "acceptance": 0.0},
        "engine_args": ("--position-acceptance", "0.8,0.5,0.2", "--draft-cost", "0.25"),
    },
}
WEIGHT_FILE_MIB = 16


def write_fault_profiles(directory: Path, models: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    make_models(models)
    for name, spec in FAULT_PROFILES.items():
        if "weights" in spec:
            make_weights(models / spec["weights"], WEIGHT_FILE_MIB)
            spec = spec | {"weights": models / spec["weights"]}
        text = fake_engine_profile(name, port=free_port(), models=models, **({"load_seconds": 1.0} | spec))
        (directory / f"{name}.toml").write_text(text)


def inside(info: sbx.SandboxInfo, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(info.inside(list(argv)), capture_output=True, text=True, timeout=timeout)
