"""System tests: a real systemd + D-Bus + journald booted in namespaces (the sandbox), as root. The
`sandbox` and `api` fixtures live in tests/conftest.py (the web tests use them too); here, the fleet's:
three sandboxed hosts per module that asks for them (tests/fleet.py), and their inventory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet import Member, booted, host_line, inventory


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[Member]]:
    yield from booted(3)


@pytest.fixture(scope="module")
def hosts(fleet: list[Member], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet's inventory, with the collection built and installed beside it."""
    return inventory(tmp_path_factory.mktemp("inventory"), [host_line(m) for m in fleet])
