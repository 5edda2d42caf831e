"""The parallel suite's assumption: under the test command's `-n N --dist loadfile`, a module's tests run
on one worker, in file order (the sandbox tiers' modules share a sandbox and build on each other's state).
Checked on a throwaway suite, as the test command runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

MODULE = """
import json, os
from pathlib import Path

def _note(name):
    with Path({out!r}).open("a") as f:
        f.write(json.dumps([__name__, name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")

def test_a(): _note("a")
def test_b(): _note("b")
def test_c(): _note("c")
"""


def test_each_module_runs_whole_on_one_worker_in_file_order(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    out = tmp_path / "seen.jsonl"
    for name in ("test_one", "test_two", "test_three", "test_four"):
        pytester.makepyfile(**{name: MODULE.format(out=str(out))})
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    for module in {m for m, _, _ in seen}:
        mine = [(name, worker) for m, name, worker in seen if m == module]
        assert [name for name, _ in mine] == ["a", "b", "c"], mine
        assert len({worker for _, worker in mine}) == 1, mine
    assert len({worker for _, _, worker in seen}) == 2  # and the modules were spread


def test_the_longest_modules_are_handed_out_first() -> None:
    """The test command keeps the collection's order (xdist would reorder by test count), and the order
    names modules that exist: a renamed one would silently start last."""
    from tests.conftest import LONGEST, ROOT

    assert "--no-loadscope-reorder" in (ROOT / "scripts/test.sh").read_text()
    assert [m for m in LONGEST if not (ROOT / m).is_file()] == []
