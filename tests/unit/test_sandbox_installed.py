"""The daemon's wheel and the sandbox's, as installed packages (not the source tree). The daemon's wheel,
what install.sh puts on a production host, carries no fake engine and no sandbox module; `k25-ctl sandbox`
from it alone says how to get the sandbox; with the sandbox's wheel beside it, `k25-ctl sandbox` is there
and the sandbox renders the unit files the daemon's wheel carries, from the package's prefix, working from /
(there is no checkout to work in)."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from pathlib import Path
from k25_sandbox import units
root = Path(sys.argv[1])
units.write_units(root, root / "k25-ctl.toml")
print(json.dumps({"module": units.__file__, "units": sorted(p.name for p in (root / "units").glob("*.service")),
                  "daemon_unit": (root / "units/k25-ctl.service").read_text()}))
"""


def _run(*argv: object, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300, **kw)  # type: ignore[call-overload, no-any-return]


def test_the_daemon_wheel_has_no_sandbox_and_the_sandbox_wheel_adds_it(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    # The build backend of this environment (the dev extras hold it): an isolated build would fetch it.
    for source in (REPO, REPO / "sandbox"):
        built = _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source)
        assert built.returncode == 0, built.stderr
    daemon_wheel = next(wheels.glob("k25_ctl-*.whl"))
    sandbox_wheel = next(wheels.glob("k25_sandbox-*.whl"))
    names = zipfile.ZipFile(daemon_wheel).namelist()
    assert any(n.startswith("daemon/") for n in names)
    assert not [n for n in names if "sandbox" in n or "fake_" in n], names
    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", "--without-pip", venv).returncode == 0
    py = venv / "bin/python"
    lib = Path(_run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    # Its dependencies from this environment (a .pth entry to a folder of links to them), without the
    # checkout's own packages: neither k25-ctl's nor the sandbox's editable install is seen.
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.startswith(("k25_", "__editable__", "_k25", "daemon")):
            (deps / entry.name).symlink_to(entry)
    (lib / "deps.pth").write_text(f"{deps}\n")
    assert _run(*pip, "--python", py, "install", "--no-deps", daemon_wheel).returncode == 0
    alone = _run(venv / "bin/k25-ctl", "sandbox", "up", cwd="/")
    assert alone.returncode == 2, alone.stdout + alone.stderr
    assert "the sandbox is not installed here" in alone.stderr
    assert "bash scripts/setup.sh" in alone.stderr
    assert _run(py, "-c", "import k25_sandbox", cwd="/").returncode != 0

    assert _run(*pip, "--python", py, "install", "--no-deps", sandbox_wheel).returncode == 0
    helped = _run(venv / "bin/k25-ctl", "sandbox", "--help", cwd="/")
    assert helped.returncode == 0, helped.stderr
    assert "--activate" in helped.stdout
    root = tmp_path / "sandbox"
    (root / "units").parent.mkdir()
    out = _run(py, "-c", PROBE, root, cwd="/")
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["module"].startswith(str(lib)), seen["module"]  # the installed package, not the checkout
    assert {"k25-ctl.service", "k25-engine@.service", "vllm-kimi-k25-int4.service"} <= set(seen["units"])
    assert "WorkingDirectory=/\n" in seen["daemon_unit"]
