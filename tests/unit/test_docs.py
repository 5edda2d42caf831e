"""The manual holds together: the README stays short and starts with the two set-up commands, every page of
docs/ is in the site's navigation, the REST reference is the schema the app declares now, and no file of
the repository points at a path outside it (the engine knowledge is docs/engines.md, not a file beside the
checkout). `mkdocs build --strict` itself runs in the test command (scripts/test.sh)."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from tests.conftest import ROOT

DOCS = ROOT / "docs"


def test_the_readme_is_short_and_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200
    head = "\n".join(lines[:6])
    assert "sudo bash scripts/demo.sh" in head
    assert "sudo bash scripts/test.sh" in head
    for link in re.findall(r"\]\((docs/[^)#]+)", "\n".join(lines)):
        assert (ROOT / link).is_file(), link


def _nav_pages(nav: object) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_nav_pages(x) for x in nav))
    if isinstance(nav, dict):
        return set().union(*(_nav_pages(x) for x in nav.values()))
    return set()


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text().replace("!!python", "#"))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == _nav_pages(config["nav"])


def test_the_rest_reference_is_the_schema_the_app_declares() -> None:
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.path[:0] = ['scripts']; import openapi; print(openapi.schema_text(), end='')",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"K25_CONFIG": "/nonexistent", "PATH": "/usr/bin"},
    )
    assert fresh.stdout == (DOCS / "reference" / "openapi.json").read_text(), "run: python scripts/openapi.py"


SHARED = "shared"  # spelt apart, so that this file does not match its own pattern
OUTSIDE = re.compile(
    rf"(?<![\w/.])(\.\./{SHARED}|{SHARED}/(DESIGN|ENGINES|PEERS|STYLE|REALENGINE|samples|poc))"
)


def test_nothing_points_outside_the_repository() -> None:
    found = []
    for top in ("daemon", "tests", "perf", "scripts", "docs", "contrib", "units", "profiles", "migrations"):
        for path in (ROOT / top).rglob("*"):
            if path.is_file() and path.suffix in {
                ".py",
                ".md",
                ".sh",
                ".toml",
                ".yml",
                ".yaml",
                ".service",
                "",
            }:
                text = path.read_text(errors="replace")
                found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    for name in ("README.md", "install.sh", "mkdocs.yml", "pyproject.toml"):
        found += [f"{name}: {m.group(0)}" for m in OUTSIDE.finditer((ROOT / name).read_text())]
    assert found == []


def test_the_headline_figure_is_said_one_way() -> None:
    """Issue 49: the manual called the verdict's figure a mean of per-request throughput in one place and a
    ratio of sums in another; the code takes the sums."""
    page = (DOCS / "benchmarks.md").read_text()
    assert "each the sum of its\n  completed requests' tokens over the sum of their times" in page
    assert "mean per-request output throughput" not in page
