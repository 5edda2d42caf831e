"""Run INSIDE the realengine sandbox: the real vLLM processes and the /dev/shm entries, as one JSON line.
A process is the real vLLM's when its command line or its mapped files name the realengine cache (its
interpreter and torch live there); the fake engines' processes carry the same titles but never map it.
`nsenter ... python -m tests.realengine.inspect_real CACHE_DIR`"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import psutil


def main() -> None:
    cache = sys.argv[1]
    procs = []
    for p in psutil.process_iter(["pid", "cmdline", "name"]):
        if p.pid == os.getpid():
            continue
        cmdline = " ".join(p.info["cmdline"] or []) or p.info["name"]
        try:
            real = cache in cmdline or cache in Path(f"/proc/{p.pid}/maps").read_text(errors="replace")
        except OSError:
            continue
        if real:
            procs.append({"pid": p.pid, "cmdline": cmdline})
    shm = sorted(e.name for e in Path("/dev/shm").iterdir())
    print(json.dumps({"procs": procs, "shm": shm}))


if __name__ == "__main__":
    main()
