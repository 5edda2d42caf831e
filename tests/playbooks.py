"""`ansible-playbook` (ansible-core from the dev extras) with the k25.ctl collection of this checkout, for
the system tests that drive hosts through it; its PLAY RECAP read back per host. `ansible-test` on the
collection, as a collection's CI runs it."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
COLLECTION = ROOT / "contrib/ansible/ansible_collections/k25/ctl"


def tool_env(home: Path) -> dict[str, str]:
    """The environment the Ansible tools of the venv run in: `home` for their own files, a UTF-8 locale
    (ansible-core refuses any other locale encoding)."""
    return {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(home), "LC_ALL": "C.UTF-8"}


@dataclass
class Played:
    rc: int
    out: str
    recap: dict[str, dict[str, int]]  # host -> ok, changed, failed, ... as the recap counts them


def play(inventory: Path, playbook: str, *args: str, home: Path, collections: Path | None = None) -> Played:
    """`playbook` (a file, or k25.ctl.NAME) on `inventory`; `home`: Ansible's own files (its temp folder);
    `collections`: where k25.ctl is installed (default: this checkout's)."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(home),
        "ANSIBLE_COLLECTIONS_PATH": str(collections or ROOT / "contrib/ansible"),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "LC_ALL": "C.UTF-8",  # ansible-core refuses any other locale encoding
    }
    cmd = [str(PLAYBOOK), "-i", str(inventory), playbook, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    out = done.stdout + done.stderr
    print(out[-6000:])
    recap = {
        m[1]: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
        for m in re.finditer(r"^(\S+)\s+:\s+(ok=.*)$", out, re.M)
    }
    return Played(done.returncode, out, recap)


def installed(where: Path) -> Path:
    """The collection as a user gets it: `ansible-galaxy collection build` of this checkout's, then
    `ansible-galaxy collection install` of the artifact into `where`; returns the collections path."""
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    env = tool_env(where)
    source = ROOT / "contrib/ansible/ansible_collections/k25/ctl"
    built = subprocess.run([str(galaxy), "collection", "build", str(source), "--output-path", str(where)],
                           capture_output=True, text=True, env=env, timeout=120, check=True)  # fmt: skip
    (artifact,) = where.glob("k25-ctl-*.tar.gz")
    assert artifact.name in built.stdout, built.stdout
    path = where / "collections"
    subprocess.run([str(galaxy), "collection", "install", str(artifact), "-p", str(path)],
                   capture_output=True, text=True, env=env, timeout=120, check=True)  # fmt: skip
    return path


def _stand_in_for_get_pip() -> None:
    """ansible-test puts pip into each virtual environment it makes with get-pip.py, fetched from a host this
    network cannot reach (the package index is reachable): scripts/ansible/get_pip.py stands in for it, in
    the cache ansible-test looks in first. Written whole then renamed: workers may do this side by side."""
    import ansible_test  # type: ignore[import-untyped]

    source = (Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text()
    found = re.search(r"pip='([0-9.]+)'", source)
    assert found is not None, "ansible-test's pip version: not where it was"
    cache = Path.home() / ".ansible/test/cache" / f"get_pip_{found.group(1).replace('.', '_')}.py"
    cache.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache.parent, suffix=".tmp")
    os.close(fd)
    shutil.copyfile(ROOT / "scripts/ansible/get_pip.py", tmp)
    Path(tmp).replace(cache)


def ansible_test(*args: str, tail: int = 6000) -> str:
    """`ansible-test ARGS --python X.Y` in the collection's folder; asserts it passed and returns its output."""
    _stand_in_for_get_pip()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    # One at a time across the test workers: each run makes its venvs in the collection's own
    # tests/output/.tmp, and two side by side broke each other's pip install (a fleet test beside the
    # sanity module's unit tests).
    lock = COLLECTION / "tests/output/.ansible-test.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-test"), *args, "--python", python, "--color", "no"],
            cwd=COLLECTION, capture_output=True, text=True, timeout=600, check=False,
            env=tool_env(Path.home()),
        )  # fmt: skip
    out = done.stdout + done.stderr
    print(out[-tail:])
    assert done.returncode == 0, out[-tail:]
    return out
