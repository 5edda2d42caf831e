"""System tests: a real systemd + D-Bus + journald booted in namespaces (the sandbox), as root. The
`sandbox` and `api` fixtures live in tests/conftest.py (the web tests use them too)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/system/" in str(item.fspath):
            item.add_marker(pytest.mark.system)
