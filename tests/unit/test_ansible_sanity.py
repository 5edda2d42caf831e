"""`ansible-test sanity` on the k25.ctl collection (contrib/ansible/ansible_collections/k25/ctl), as a
collection's CI runs it: documentation against argument specs, imports, pylint, pep8, yamllint, licences,
shebangs and the rest. ansible-test makes one virtual environment per test (cached under
~/.ansible/test, outside the repository) and fetches get-pip.py from a host this network cannot reach:
scripts/ansible/get_pip.py stands in for it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

COLLECTION = ROOT / "contrib/ansible/ansible_collections/k25/ctl"
ANSIBLE_TEST = Path(sys.executable).parent / "ansible-test"


def _stand_in_for_get_pip() -> None:
    import ansible_test  # type: ignore[import-untyped]

    source = (Path(ansible_test.__file__).parent / "_internal/python_requirements.py").read_text()
    found = re.search(r"pip='([0-9.]+)'", source)
    assert found is not None, "ansible-test's pip version: not where it was"
    cache = Path.home() / ".ansible/test/cache" / f"get_pip_{found.group(1).replace('.', '_')}.py"
    cache.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(ROOT / "scripts/ansible/get_pip.py", cache)


def test_the_collection_passes_ansible_test_sanity() -> None:
    _stand_in_for_get_pip()
    done = subprocess.run(
        [str(ANSIBLE_TEST), "sanity", "--python", f"{sys.version_info.major}.{sys.version_info.minor}",
         "--color", "no"],
        cwd=COLLECTION, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    print(out[-8000:])
    assert done.returncode == 0, out[-8000:]
    ran = re.findall(r'Running sanity test "([\w-]+)"', out)
    # The tests that read the modules' code and documentation ran (none skipped for a missing tool).
    assert {"validate-modules", "import", "pylint", "pep8", "yamllint", "ansible-doc", "compile"} <= set(
        ran
    ), ran
