"""A defect from the project's history planted back, for showing that the simulation catches it: a git
worktree of HEAD at /tmp/k25-plant-NAME with perf/sim/planted/NAME.patch applied, and a Python that
imports its `daemon` (a venv beside it whose only path entries are the worktree and this venv's packages:
the editable install's finder, which points at this checkout, is not loaded there). The sandbox then runs
the planted daemon (its units run `python -m daemon.cli` in the worktree). Nothing in this checkout
changes."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLANTED = Path(__file__).resolve().parent / "planted"


def names() -> list[str]:
    return sorted(p.stem for p in PLANTED.glob("*.patch"))


def prepare(name: str) -> tuple[Path, Path]:
    """(the worktree, its python). `none`: HEAD as it is, a copy that edits here do not touch while a long
    run restarts daemons and engines (each start imports the code afresh)."""
    patch = PLANTED / f"{name}.patch"
    if name != "none" and not patch.is_file():
        raise SystemExit(f"no planted defect {name!r} (there are: none, {', '.join(names())})")
    tree = Path(tempfile.gettempdir()) / f"k25-plant-{name}"
    venv = tree.with_name(f"{tree.name}.venv")
    if tree.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), "HEAD"], check=True)
    # the simulation's own files as they are here (perf/sim may be newer than HEAD while it is written)
    subprocess.run(["cp", "-r", str(ROOT / "perf"), str(tree)], check=True)
    if name != "none":
        subprocess.run(["git", "-C", str(tree), "apply", str(patch)], check=True)
    if not (venv / "bin/python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = Path(subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    here = sysconfig.get_paths()["purelib"]
    (site / "k25_plant.pth").write_text(f"{tree}\n{tree / 'sandbox'}\n{here}\n")
    # Byte-compiled once: with PYTHONDONTWRITEBYTECODE=1 (this machine's environment) every daemon, engine
    # and CLI start of the walk compiled the worktree's modules again (a restarted daemon: 8 s of CPU, not 2).
    subprocess.run([str(venv / "bin/python"), "-m", "compileall", "-q", "-j", "0", str(tree / "daemon"),
                    str(tree / "sandbox"), str(tree / "perf")], check=True)  # fmt: skip
    return tree, venv / "bin/python"
