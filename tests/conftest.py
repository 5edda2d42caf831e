from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from k25_sandbox.ports import REGISTRY_ENV

if TYPE_CHECKING:
    from k25_sandbox.sandbox import SandboxInfo
    from tests.sandboxing import Api

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
CHROMIUM = "/usr/bin/chromium"
TIERS = ("system", "gpu", "web", "realengine")  # a tier's folder marks its tests (`pytest -m system`)


# Under `pytest -n N --dist loadfile` each module runs whole on one worker, in file order: a module of the
# sandbox tiers shares a sandbox, the session's (booted once per worker that gets such a module) or one it
# boots itself. (loadgroup would do the same through xdist_group marks, but it silently stops grouping on
# pytest 9.2: pytest-xdist#1386.) Modules are handed out in this order (the test command passes
# --no-loadscope-reorder: xdist would otherwise hand out the modules with the most tests first, and the
# real-engine module, 7 tests and the longest, started after twenty short ones): the longest modules
# first, then tier by tier, so that the short unit and api modules fill the end.
ORDER = ("realengine", "system", "web", "api", "unit", "gpu")
LONGEST = (  # seconds on a CI run, roughly: 300, 260, 250, 240, 185, 175, 160, 150, then 85-140 each
    "tests/system/test_install.py",
    "tests/realengine/test_real_vllm.py",
    "tests/system/test_capacity.py",
    "tests/system/test_park.py",
    "tests/system/test_simulation.py",  # 50 steps of the seeded walk: about 120 s
    "tests/system/test_bench.py",
    "tests/system/test_fleet.py",
    "tests/system/test_fleet_faults.py",
    "tests/system/test_park_wakes.py",
    "tests/system/test_sweep.py",
    "tests/system/test_capture.py",
    "tests/system/test_watch.py",
    # CPU-bound modules of a minute each (ansible-test, 400 fake engine wakes): started early, so that the
    # end of the run is filled by the short unit and api modules instead of waiting on them.
    "tests/system/test_gpu_health.py",
    "tests/unit/test_ansible_sanity.py",
    "tests/unit/test_wake_fingerprint.py",
)


_PORTS = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """One folder of claimed ports for the whole run: the controller makes it before xdist starts the
    workers, which inherit it, so that no two sandboxes or servers of any worker get the same port."""
    if REGISTRY_ENV not in os.environ:
        os.environ[REGISTRY_ENV] = tempfile.mkdtemp(prefix="k25-ports-")
        config.stash[_PORTS] = os.environ[REGISTRY_ENV]


def pytest_unconfigure(config: pytest.Config) -> None:
    if folder := config.stash.get(_PORTS, None):
        shutil.rmtree(folder, ignore_errors=True)
        del os.environ[REGISTRY_ENV]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """With K25_TEST_TIMELINE=FILE, each test's worker, start and end (wall clock) go to FILE: where the
    suite's time goes, worker by worker (`perf/timeline.py FILE` sums it)."""
    began = time.time()
    try:
        return (yield)
    finally:
        if out := os.environ.get("K25_TEST_TIMELINE"):
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            with open(out, "a") as f:  # noqa: PTH123 - one short append per test
                f.write(f"{worker}\t{began:.3f}\t{time.time():.3f}\t{item.nodeid}\n")


def _tier(item: pytest.Item) -> str | None:
    """The tier folder a test lives in (tests/unit, tests/api or one of TIERS)."""
    parts = Path(str(item.fspath)).relative_to(ROOT).parts
    return parts[1] if len(parts) > 1 and parts[0] == "tests" and parts[1] in ORDER else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (tier := _tier(item)) in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
    rank = {t: i for i, t in enumerate(ORDER)}
    first = {m: i for i, m in enumerate(LONGEST)}

    def order(item: pytest.Item) -> tuple[int, int]:
        module = Path(str(item.fspath)).relative_to(ROOT).as_posix()
        if module in first:
            return (0, first[module])
        return (1, rank.get(_tier(item) or "", len(ORDER)))

    items.sort(key=order)  # stable: file order within


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def stock_profiles() -> Path:
    return ROOT / "profiles"


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxInfo]:
    """One sandbox for the session (system and web tests), with the fault profiles added."""
    import os

    from k25_sandbox import sandbox as sbx
    from tests.sandboxing import ROW_S, write_fault_profiles

    if os.geteuid() != 0:
        pytest.fail("system and web tests need root: they boot systemd in namespaces")
    extra = tmp_path_factory.mktemp("profiles")
    models = tmp_path_factory.mktemp("models")
    write_fault_profiles(extra, models)
    # Minute rows of serving metrics, a quarter-minute long here: what they hold is the same, sooner.
    settings = {"metrics_row_s": str(ROW_S)}
    info = sbx.up(profiles=extra, load_seconds=1.0, binds=(models,), settings=settings)
    yield info
    sbx.down(info)
    assert sbx.leftovers(info) == []


@pytest.fixture(scope="session")
def api(sandbox: SandboxInfo) -> Api:
    from tests.sandboxing import Api

    return Api(sandbox)


def _chromium_page(*, bypass_csp: bool) -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        context = browser.new_context(viewport={"width": 1366, "height": 900}, bypass_csp=bypass_csp)
        yield context.new_page()
        context.close()
        browser.close()


@pytest.fixture
def page() -> Iterator[Any]:
    """A page in Debian's headless Chromium (Playwright), for the web tests. It bypasses the page's CSP:
    Playwright's own wait_for_function evaluates strings, which the CSP forbids (test_csp.py keeps it)."""
    yield from _chromium_page(bypass_csp=True)


@pytest.fixture
def strict_page() -> Iterator[Any]:
    """The same, under the page's own Content-Security-Policy (wait in Python, not with wait_for_function)."""
    yield from _chromium_page(bypass_csp=False)
