"""`ansible-test sanity` on the k25.ctl collection (contrib/ansible/ansible_collections/k25/ctl), as a
collection's CI runs it: documentation against argument specs, imports, pylint, pep8, yamllint, licences,
shebangs and the rest. ansible-test makes one virtual environment per test (cached under
~/.ansible/test, outside the repository); tests/playbooks.ansible_test runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.playbooks import COLLECTION, ansible_test, tool_env


def test_the_collection_passes_ansible_test_sanity() -> None:
    out = ansible_test("sanity", tail=8000)
    ran = re.findall(r'Running sanity test "([\w-]+)"', out)
    # The tests that read the modules' code and documentation ran (none skipped for a missing tool).
    assert {"validate-modules", "import", "pylint", "pep8", "yamllint", "ansible-doc", "compile"} <= set(
        ran
    ), ran


def _tool_env(home: Path) -> dict[str, str]:
    return tool_env(home) | {"ANSIBLE_COLLECTIONS_PATH": str(ROOT / "contrib/ansible")}


def test_the_changelog_is_kept_with_antsibull_changelog(tmp_path: Path) -> None:
    """Issue 54: changelogs/ with fragments; the generated CHANGELOG.rst is what changelog.yaml says."""
    tool = Path(sys.executable).parent / "antsibull-changelog"
    for args in (["lint"], ["lint-changelog-yaml", "changelogs/changelog.yaml"]):
        done = subprocess.run([str(tool), *args], cwd=COLLECTION, capture_output=True, text=True,
                              env=_tool_env(tmp_path), timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "", done.stdout
    galaxy = (COLLECTION / "galaxy.yml").read_text()
    version = re.search(r"^version: (\S+)$", galaxy, re.M)
    assert version is not None
    assert f"v{version.group(1)}\n" in (COLLECTION / "CHANGELOG.rst").read_text()  # this version's notes


def test_the_collection_docs_pass_antsibull_docs_lint(tmp_path: Path) -> None:
    """Issue 54: `antsibull-docs lint-collection-docs --plugin-docs`, as the Ansible docsite checks a collection:
    the plugins' and roles' documentation renders, its markup is valid and its references (M(), O(), ...)
    name modules and options that exist."""
    tool = Path(sys.executable).parent / "antsibull-docs"
    done = subprocess.run([str(tool), "lint-collection-docs", "--plugin-docs", "."], cwd=COLLECTION,
                          capture_output=True, text=True, env=_tool_env(tmp_path), timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "", done.stdout  # a finding is a line here


def test_the_old_module_name_redirects_with_a_deprecation(tmp_path: Path) -> None:
    """k25_status is k25_status_info now (read-only modules that return data are *_info)."""
    done = subprocess.run([str(Path(sys.executable).parent / "ansible-doc"), "k25.ctl.k25_status"],
                          capture_output=True, text=True, env=_tool_env(tmp_path), timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "k25.ctl.k25_status has been deprecated" in done.stderr
    assert "k25_status_info.py" in done.stdout


def test_the_collection_passes_its_own_unit_tests() -> None:
    """Issue 54: the collection carries its tests (tests/unit: module_utils and the filter), run by
    `ansible-test units` in its own virtual environment, as a collection's CI runs them."""
    out = ansible_test("units", "--venv", tail=4000)
    passed = [int(n) for n in re.findall(r"=+ (\d+) passed", out)]
    assert sum(passed) >= 6, passed  # module_utils (3) and the controller's filter (3) both ran
