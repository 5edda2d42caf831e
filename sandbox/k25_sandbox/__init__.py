"""The sandbox: a real systemd + D-Bus + journald booted in Linux namespaces, with fake engines and
simulated GPUs, for the system tests and the demo."""
