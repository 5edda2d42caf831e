"""Fixtures of the unit tests: fake engines run as processes (tests/fake_engines.py)."""

from tests.fake_engines import start  # noqa: F401 (the fixture, for the tests of this folder)
