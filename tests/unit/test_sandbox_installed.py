"""`k25-ctl sandbox` from an installed package (install.sh's venv), not the source tree: the wheel carries
the unit files, and the sandbox renders them from the package's prefix, working from / (there is no
checkout to work in)."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from pathlib import Path
from daemon.sandbox import layout
root = Path(sys.argv[1])
layout.write_units(root, root / "k25-ctl.toml")
print(json.dumps({"module": layout.__file__, "units": sorted(p.name for p in (root / "units").glob("*.service")),
                  "daemon_unit": (root / "units/k25-ctl.service").read_text()}))
"""


def test_an_installed_package_renders_the_sandbox_units(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    # The build backend of this environment (the dev extras hold it): an isolated build would fetch it.
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
                   check=True, timeout=300)  # fmt: skip
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin/python"
    lib = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    # Its dependencies from this environment (a .pth entry; the checkout's editable hook is not run).
    (lib / "deps.pth").write_text(site.getsitepackages()[0] + "\n")
    subprocess.run(
        [*pip, "--python", str(py), "install", "--no-deps", *wheels.glob("*.whl")], check=True, timeout=300
    )
    root = tmp_path / "sandbox"
    (root / "units").parent.mkdir()
    out = subprocess.run([py, "-c", PROBE, str(root)], capture_output=True, text=True, cwd="/", timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["module"].startswith(str(lib)), seen["module"]  # the installed package, not the checkout
    assert {"k25-ctl.service", "k25-engine@.service", "vllm-kimi-k25-int4.service"} <= set(seen["units"])
    assert "WorkingDirectory=/\n" in seen["daemon_unit"]
