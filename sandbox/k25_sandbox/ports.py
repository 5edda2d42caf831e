"""TCP ports for sandboxes, their engines and the servers tests start beside them.

A port is chosen long before it is listened on (a profile names its engine's port when the sandbox is made;
the engine binds it minutes later), so it must be one nothing else takes in between: not one from the
kernel's ephemeral range, which any socket bound to port 0 or any outgoing connection may get (CI: a
sandbox's engine port was found listened on by another worker's process), and not one another sandbox
chose. Below the ephemeral range only explicit binds take a port; with K25_SANDBOX_PORTS naming a folder
(the test suite's workers share one), each choice is claimed there by an exclusive file create."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

REGISTRY_ENV = "K25_SANDBOX_PORTS"
LOWEST = 10000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _claim(registry: Path | None, port: int) -> bool:
    if registry is None:
        return True
    try:
        os.close(os.open(registry / str(port), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on, below the ephemeral range, claimed in the registry
    folder where K25_SANDBOX_PORTS names one."""
    folder = os.environ.get(REGISTRY_ENV)
    registry = Path(folder) if folder else None
    high = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(LOWEST, high)
        if _bindable(port) and _claim(registry, port):
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {high} after 1000 tries")
