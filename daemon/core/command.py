"""How this installation runs its own command: the `k25-ctl` console script beside this Python (a venv's),
else `python -m daemon.cli`. Units and scheduled timers exec it."""

from __future__ import annotations

import sys
from pathlib import Path


def k25_command() -> list[str]:
    exe = Path(sys.executable).parent / "k25-ctl"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "daemon.cli"]
