"""sd_notify(3) for the daemon's own unit (Type=notify): READY=1, STATUS=..., WATCHDOG=1."""

from __future__ import annotations

import os
import socket


def sd_notify(message: str) -> bool:
    """Send one notification to systemd; False when not run under a notify-type unit."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        try:
            sock.sendto(message.encode(), address)
        except OSError:
            return False
    return True
