"""What the simulation's invariants read INSIDE the sandbox, in one process (one nsenter a step, not one per
fact): each unit's state as systemd says it, the engine-titled processes with the unit whose cgroup holds
them, and the engine-named files in /dev/shm with the processes that map them. Standard library only: it
starts in a fraction of the daemon's import time.

`python -m perf.sim.inside '{"units": [...], "titles": [...], "shm": [...]}'` prints one JSON object."""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SHM = Path("/dev/shm")  # noqa: S108 - the engines' shm folder, read only
PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


def _unit_states(units: list[str]) -> dict[str, dict[str, str]]:
    """Each unit's ActiveState, MainPID and when its main process started (unix seconds, "" if never)."""
    out = subprocess.run(
        [
            "systemctl",
            "show",
            "--timestamp=unix",
            "-p",
            "Id,ActiveState,MainPID,ExecMainStartTimestamp,ExecMainStartTimestampMonotonic",
            "--",
            *units,
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    states: dict[str, dict[str, str]] = {}
    for block in out.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" in fields:
            fields["ExecMainStartTimestamp"] = fields.get("ExecMainStartTimestamp", "").lstrip("@")
            states[fields.pop("Id")] = fields
    return states


def _unit_of(proc: Path) -> str | None:
    try:
        text = (proc / "cgroup").read_text()
    except OSError:
        return None
    for part in text.replace("\n", "/").split("/"):
        if part.endswith(".service"):
            return part
    return None


def _processes(titles: list[str]) -> list[dict[str, Any]]:
    found = []
    for proc in PROC.iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            state, started = stat[0], int(stat[19]) / TICKS  # field 22: start time, ticks since boot
        except OSError:
            continue
        if any(fnmatch.fnmatch(cmd, t) for t in titles) and state != "Z":
            found.append({"pid": int(proc.name), "cmd": cmd[:120], "unit": _unit_of(proc), "state": state,
                          "started_s": started})  # fmt: skip
    return found


def _shm_files(patterns: list[str]) -> dict[str, list[int]]:
    """Each engine-named shm file and the PIDs that map or hold it open."""
    names = [f.name for f in SHM.iterdir() if any(fnmatch.fnmatch(f.name, p) for p in patterns)]
    holders: dict[str, list[int]] = {n: [] for n in names}
    if not names:
        return holders
    for proc in PROC.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            maps = (proc / "maps").read_text()
            fds = [str(fd.readlink()) for fd in (proc / "fd").iterdir()]
        except OSError:
            continue
        for n in names:
            path = str(SHM / n)
            if path in maps or path in fds:
                holders[n].append(int(proc.name))
    return holders


def main() -> None:
    ask = json.loads(sys.argv[1])
    print(
        json.dumps(
            {
                "units": _unit_states(ask["units"]),
                "processes": _processes(ask["titles"]),
                "shm": _shm_files(ask["shm"]),
            }
        )
    )


if __name__ == "__main__":
    main()
