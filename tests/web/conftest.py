"""Web tests: the status page in Debian's headless Chromium (Playwright), against the sandbox."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/web/" in str(item.fspath):
            item.add_marker(pytest.mark.web)
