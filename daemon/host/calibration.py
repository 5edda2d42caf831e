"""Running the host's park-rate measurement (calibrate_torch.py) with an engine's own interpreter: the
interpreter a profile's argv runs (a Python, or a console script's shebang), one subprocess, its one JSON
line back. k25-ctl never imports torch."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.core.errors import InvalidInput, K25Error

SCRIPT = Path(__file__).with_name("calibrate_torch.py")
RATE_KEYS = (
    "pin_process",
    "pin_host",
    "pin_process_registered",
    "pin_host_registered",
    "device_to_host",
    "host_to_device",
    "page_cache",
    "disk",
)


def interpreter_of(argv: Sequence[str]) -> str | None:
    """The Python an engine's argv runs: argv[0] itself when it is one, else the shebang of the console
    script it names (`vllm` -> its venv's python). None: not found (a shell wrapper: say --python)."""
    if not argv:
        return None
    exe = shutil.which(argv[0]) or argv[0]
    if Path(exe).name.startswith("python"):
        return exe
    try:
        with Path(exe).open("rb") as f:
            first = f.readline(512).decode(errors="replace")
    except OSError:
        return None
    if first.startswith("#!"):
        words = first[2:].split()
        interpreter = words[-1] if words and Path(words[0]).name == "env" else (words[0] if words else "")
        if Path(interpreter).name.startswith("python"):
            return shutil.which(interpreter) or interpreter
    return None


@dataclass(frozen=True)
class Measured:
    """The rates (GiB/s): each one's median over the repeats, and its lowest and highest."""

    rates: dict[str, float]
    ranges: dict[str, tuple[float, float]]


def measure(
    python: str,
    *,
    gib: float,
    processes: int,
    threads: int,
    file: Path,
    timeout_s: float,
    repeats: int = 3,
) -> Measured:
    """The rates as the script measured them with `python`, `repeats` times each. K25Error with its output
    when it fails."""
    argv = [python, str(SCRIPT), "--gib", str(gib), "--processes", str(processes), "--threads", str(threads)]
    argv += ["--repeats", str(repeats)]
    try:
        done = subprocess.run(  # noqa: S603 - the operator's engine interpreter, our own script
            [*argv, "--file", str(file)], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise InvalidInput(f"no interpreter {python!r}: name the engine's Python with --python") from None
    except subprocess.TimeoutExpired:
        raise K25Error(f"the measurement did not end within {timeout_s:.0f}s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise K25Error(f"the measurement failed with {python} (exit {done.returncode}):\n{tail}")
    data = json.loads(lines[-1])
    ranges = data.get("ranges") or {}
    return Measured(
        {k: float(data[k]) for k in RATE_KEYS},
        {k: (float(ranges[k][0]), float(ranges[k][1])) for k in RATE_KEYS if k in ranges},
    )
