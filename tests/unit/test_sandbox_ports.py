"""Sandbox ports: below the kernel's ephemeral range (no port-0 bind or outgoing connection can take one
before its engine listens) and claimed in the shared folder (no two workers get the same)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from k25_sandbox import ports
from k25_sandbox.ports import REGISTRY_ENV, free_port


def test_ports_are_below_the_ephemeral_range_and_claimed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path))
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    chosen = [free_port() for _ in range(200)]
    assert len(set(chosen)) == 200
    assert all(ports.LOWEST <= p < low for p in chosen)
    assert sorted(int(f.name) for f in tmp_path.iterdir()) == sorted(chosen)


def test_a_claimed_or_listened_port_is_never_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REGISTRY_ENV, str(tmp_path))
    monkeypatch.setattr(ports, "LOWEST", 20000)
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: 20003)
    (tmp_path / "20000").touch()  # another worker's
    with socket.socket() as held:
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            held.bind(("127.0.0.1", 20001))
        except OSError:
            pytest.skip("port 20001 is in use on this machine")
        held.listen()
        assert free_port() == 20002
        with pytest.raises(RuntimeError, match="no free port between 20000 and 20003"):
            free_port()  # 20002 is claimed now
