"""The web status page in real headless Chromium (Debian's), against the daemon in the sandbox."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon.sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api

pytestmark = pytest.mark.web
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("K25_ARTIFACTS", Path(__file__).resolve().parents[2] / "artifacts"))


@pytest.fixture
def page() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        context = browser.new_context(viewport={"width": 1366, "height": 900})
        yield context.new_page()
        context.close()
        browser.close()


def test_page_activate_with_live_progress(page: Any, api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept(sandbox.token))  # the token prompt, answered once

    page.goto(sandbox.url + "/")
    page.wait_for_function(
        "document.getElementById('active-profile').textContent === 'baseline'", timeout=15000
    )
    assert page.text_content("#state") == "active"
    assert page.locator("button[data-activate]").count() >= 3

    page.click("button[data-activate='slow']")
    page.wait_for_selector("#switch-card:not([hidden])", timeout=15000)
    seen: set[str] = set()
    deadline_ms = 60000
    # Sample the bar the browser shows until the switch ends: it must move through several values.
    page.evaluate(
        """() => { window.__widths = new Set();
                   new MutationObserver(() => window.__widths.add(document.getElementById('progress-bar').style.width))
                     .observe(document.getElementById('progress-bar'), {attributes: true}); }"""
    )
    page.wait_for_function(
        "document.getElementById('active-profile').textContent === 'slow'", timeout=deadline_ms
    )
    seen = set(page.evaluate("() => Array.from(window.__widths)"))
    assert len(seen - {"0%"}) >= 3, seen
    assert page.text_content("#state") == "active"
    assert page.evaluate("() => sessionStorage.getItem('k25-token')") == sandbox.token
    page.wait_for_function(
        "document.querySelector('#runs tr td:nth-child(4)').textContent === 'active'", timeout=15000
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "web-status-page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    assert errors == []
    api.activate("baseline")
