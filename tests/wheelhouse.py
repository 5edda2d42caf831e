"""One folder of wheels for every install.sh a test run makes (install.sh --wheels): k25-ctl's
dependencies, pip, setuptools and wheel, built once per test run by the first test that needs them (the
others wait on its lock) and kept between runs while pyproject.toml does not change. Each install.sh used
to fetch and build them all from the package index: on a machine with empty caches, 306, 143 and 143 s of
the three install tests, against about 96 s with pip's cache warm.

Outside the repository and outside what a fresh-host sandbox hides (/var/cache/k25-ctl): its overlays read
through to it."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from k25_sandbox.units import REPO

HOME = Path("/var/cache/k25-wheelhouse")
DONE = ".complete"


def _key() -> str:
    """What the wheels depend on: the package's requirements and this interpreter."""
    text = (REPO / "pyproject.toml").read_bytes() + sys.version.encode()
    return hashlib.sha256(text).hexdigest()[:16]


def wheelhouse() -> Path:
    """The folder, built if it is not there yet (blocking; under a lock shared by every test worker)."""
    HOME.mkdir(parents=True, exist_ok=True)
    folder = HOME / _key()
    with (HOME / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / DONE).exists():
            return folder
        staging = Path(tempfile.mkdtemp(prefix="build-", dir=HOME))
        try:
            argv = [sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "-w"]
            done = subprocess.run(
                [*argv, str(staging), str(REPO), "pip", "setuptools", "wheel"],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert done.returncode == 0, f"pip wheel failed:\n{done.stdout}\n{done.stderr}"
            for own in staging.glob("k25_ctl-*.whl"):  # install.sh builds k25-ctl from its checkout
                own.unlink()
            (staging / DONE).write_text(" ".join(sorted(p.name for p in staging.glob("*.whl"))) + "\n")
            shutil.rmtree(folder, ignore_errors=True)
            staging.rename(folder)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def offline_env(folder: Path) -> dict[str, str]:
    """pip's environment for an install.sh that takes no --wheels (an older release's): the same folder."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder)}
