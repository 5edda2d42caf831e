"""System tests: a real systemd + D-Bus + journald booted in namespaces (the sandbox), as root. The
`sandbox` and `api` fixtures live in tests/conftest.py (the web tests use them too)."""

from __future__ import annotations
