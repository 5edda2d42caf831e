"""Switches that clients do not feel, end to end: Debian's HAProxy in front of two sandbox hosts (each its
own systemd, k25-ctl and fake engines, every profile on the host's service_port), health-checking /ready
every second (fall 2, rise 1) as the manual's snippet does (docs/load-balancer.md). A client keeps 8 requests in flight through
HAProxy while host A switches to another profile and back: no request fails, A's switches record their
downtime and no request cut, and HAProxy took A out for each switch and back after."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from k25_sandbox import sandbox as sbx
from k25_sandbox.balancer import Host, Load, haproxy
from k25_sandbox.ports import free_port
from tests.sandboxing import Api
from tests.waiting import eventually_sync

pytestmark = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy: scripts/setup.sh installs it"
)


@pytest.fixture(scope="module")
def hosts() -> Iterator[list[tuple[sbx.SandboxInfo, int]]]:
    """Two hosts, each with its service port; the grace outlasts HAProxy's two failed checks (2 s)."""
    booted: list[tuple[sbx.SandboxInfo, int]] = []
    try:
        for _ in range(2):
            service = free_port()
            settings = {"service_port": str(service), "drain_grace_s": "3.5", "drain_poll_s": "0.1"}
            booted.append((sbx.up(load_seconds=1.0, settings=settings), service))
        yield booted
    finally:
        for info, _ in booted:
            sbx.down(info)


def test_a_switch_behind_haproxy_fails_no_request(hosts: list[tuple[sbx.SandboxInfo, int]]) -> None:
    (a, a_port), (b, b_port) = hosts
    api_a, api_b = Api(a), Api(b)
    for api in (api_a, api_b):
        assert api.activate("baseline")["outcome"] == "active"
    servers = [Host("a", a_port, a.port), Host("b", b_port, b.port)]
    with haproxy(servers, free_port()) as proxy:
        eventually_sync(lambda: all(s["status"] == "UP" for s in proxy.servers().values()), what="both UP")
        with Load(proxy.url, clients=8) as load:
            eventually_sync(lambda: load.count() >= 16, what="traffic flows")
            away = api_a.activate("vllm-eagle3")
            # A is back in rotation (HAProxy saw /ready 200) and serves the load again before it switches back.
            served = proxy.served("a")
            eventually_sync(lambda: proxy.serves_again("a", served), what="A back in rotation")
            back = api_a.activate("baseline")
            served = proxy.served("a")
            eventually_sync(lambda: proxy.serves_again("a", served), what="A back in rotation again")
        stats = proxy.servers()
    failed = load.failed()
    print(
        f"through haproxy: {load.count()} requests, {len(failed)} failed; A taken out {stats['a']['chkdown']}x"
    )
    assert failed == [], failed[:5]
    for run in (away, back):
        assert run["outcome"] == "active", run
        cost = run["switch_cost"]
        assert cost["drain_cut"] == 0, cost
        assert cost["drain_timed_out"] is False
        assert cost["downtime_s"] is not None
        assert cost["downtime_s"] > 3.5  # at least the grace: the balancer saw 503 before anything stopped
    assert int(stats["a"]["chkdown"]) >= 2  # HAProxy took A out for each switch
    assert int(stats["b"]["chkdown"]) == 0
    assert (stats["a"]["status"], stats["b"]["status"]) == ("UP", "UP")
    served_by_b = int(stats["b"]["stot"])
    assert served_by_b > 0
