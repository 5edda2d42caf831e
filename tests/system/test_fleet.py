"""A fleet of three hosts through the k25.ctl collection (contrib/ansible), end to end: three sandboxes
(each its own systemd, k25-ctl and fake engines, every profile on the host's service port) behind
Debian's HAProxy, which checks each host's /ready every half second. A client keeps 8 requests in flight
through HAProxy while `ansible-playbook` (ansible-core from PyPI, the modules on each "host" by the local
connection) checks, rolls out, rolls out again, and meets a broken profile on host 2; then the fleet's
A/B (experiment.yml) with one host planted slower, and a host that came back slower, found by a real
Prometheus with the alert rules. Rollouts that lose a host: test_fleet_faults.py."""

from __future__ import annotations

import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from k25_sandbox.balancer import Host, Load, haproxy
from k25_sandbox.ports import free_port
from tests.fleet import GATE, Member, play, rate_of, with_option
from tests.playbooks import COLLECTION, ansible_test
from tests.prometheus import prometheus, query
from tests.waiting import eventually_sync

pytestmark = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy: scripts/setup.sh installs it"
)
RELATIVE = {"concurrency": [4], "num_prompts": 24, "max_tokens": 64, "warmups": 0}  # ~4.7 s at 82.5 tok/s
# The A/B's: 12 requests of 256 tokens (the same ~5 s). Each request pays a fixed cost before its pacing
# starts (the HTTP hop and the event loop's turn: a median time to first token of 26-53 ms on a busy
# machine, against ~7 ms idle), never recovered, and it weighs most on the faster profile's shorter
# requests, so load pulls every ratio down, by a little more on one host than another; and a stall moves a
# request's end only where it falls near one (the fakes pace against each request's start): fewer, longer
# requests, fewer ends. 22 A/Bs beside a whole test run (5 workers more): sglang-eagle3 read 565-587 tok/s
# of its 594 at 128 tokens, 582-591 at 256; the healthy hosts 0.8% apart on average at 128 (2.3% at most),
# 0.2% (0.7%) at 256; host 3's margin to the nearer healthy host 1.090-1.123 at 128, 1.103-1.125 at 256
# (the assertion needs 1.053). At 64 tokens, a loaded fresh-clone CI read one healthy host 6% off.
AB = RELATIVE | {"num_prompts": 12, "max_tokens": 256}


def test_a_rollout_moves_one_host_at_a_time_and_no_client_notices(fleet: list[Member], hosts: Path) -> None:
    h1, h2, h3 = fleet
    servers = [Host(m.name, m.service_port, m.info.port) for m in fleet]
    with haproxy(servers, free_port(), inter="500ms") as proxy:
        eventually_sync(lambda: all(s["status"] == "UP" for s in proxy.servers().values()), what="all UP")
        with Load(proxy.url, clients=8, max_tokens=64) as load:  # 8 in flight, at fewer requests a second
            eventually_sync(lambda: load.count() >= 16, what="traffic flows")
            last = {m.name: m.last_run() for m in fleet}

            checked = play(hosts, "rollout", "--check", "-e", "k25_profile=vllm-eagle3")
            assert checked.rc == 0, checked.out
            assert {h: r["changed"] for h, r in checked.recap.items()} == {"h1": 1, "h2": 1, "h3": 1}
            assert all(m.switches(last[m.name]) == [] for m in fleet)  # --check switched nothing
            assert all(m.serving() == ("active", "baseline") for m in fleet)

            rolled = play(hosts, "rollout", "-e", "k25_profile=vllm-eagle3", "-e", GATE)
            assert rolled.rc == 0, rolled.out
            assert all(r["failed"] == 0 and r["changed"] >= 1 for r in rolled.recap.values()), rolled.recap
            switches = {m.name: m.switches(last[m.name]) for m in fleet}
            for m in fleet:
                assert m.serving() == ("active", "vllm-eagle3")
                (run,) = switches[m.name]
                assert (run["profile"], run["outcome"]) == ("vllm-eagle3", "active")
                assert run["switch_cost"]["drain_cut"] == 0
            # One host at a time: each switch began after the one before had ended (and its gate with it).
            assert switches["h1"][0]["ended_at"] < switches["h2"][0]["started_at"]
            assert switches["h2"][0]["ended_at"] < switches["h3"][0]["started_at"]
            gates = [b for b in h2.api.client.get("/benchmarks").json() if b["profile"] == "vllm-eagle3"]
            assert len(gates) == 1  # the gate's benchmark, recorded

            again = play(hosts, "rollout", "-e", "k25_profile=vllm-eagle3", "-e", GATE)
            assert again.rc == 0, again.out
            assert {h: r["changed"] for h, r in again.recap.items()} == {"h1": 0, "h2": 0, "h3": 0}

            last = {m.name: m.last_run() for m in fleet}
            kept = h2.edit_argv("sglang-eagle3", lambda argv: [*argv, "--fault", "crash-loading"])
            try:
                broken = play(hosts, "rollout", "-e", "k25_profile=sglang-eagle3", "-e", GATE)
            finally:
                h2.restore_profile("sglang-eagle3", kept)
            assert broken.rc != 0, broken.out
            assert h1.serving() == ("active", "sglang-eagle3")
            failed, back = h2.switches(last["h2"])
            assert (failed["profile"], failed["outcome"]) == ("sglang-eagle3", "failed")
            assert (back["kind"], back["profile"], back["outcome"]) == ("rollback", "vllm-eagle3", "active")
            assert back["parent_id"] == failed["id"]
            assert h2.serving() == ("active", "vllm-eagle3")  # rolled back by itself
            assert f"rolled back to vllm-eagle3 (run {back['id']}): active" in broken.out
            assert h3.switches(last["h3"]) == []  # the play stopped at host 2
            assert h3.serving() == ("active", "vllm-eagle3")
            assert broken.recap["h2"]["failed"] == 1
            assert broken.recap.get("h3", {}).get("changed", 0) == 0
        stats = proxy.servers()
    failed_requests = load.failed()
    print(f"through haproxy: {load.count()} requests, {len(failed_requests)} failed; "
          f"taken out: {[stats[m.name]['chkdown'] for m in fleet]}")  # fmt: skip
    assert failed_requests == [], failed_requests[:5]
    assert all(int(stats[m.name]["chkdown"]) >= 1 for m in fleet)  # each host left rotation for its switch


def test_the_fleet_ab_judges_each_host_on_itself(fleet: list[Member], hosts: Path) -> None:
    """Each host's A/B of vllm-eagle3 against sglang-eagle3; host 3's sglang-eagle3 engine runs 25%
    slower than the others' (a host that disagrees; 10% was within what two identical hosts differ by
    beside the whole suite on 6 workers: 2.70x and 2.45x). The fleet's verdict: faster on all three, host 3 named
    as the outlier, the fleet interval pooled from the hosts' own (inside their span)."""
    h3 = fleet[2]
    before = {m.name: m.serving()[1] for m in fleet}
    kept = h3.edit_argv("sglang-eagle3", with_option("--rate", f"{rate_of(h3, 'sglang-eagle3') * 0.75:g}"))
    # One host at a time (k25_serial 1, the playbook's default): three sandboxed hosts benchmarking at once
    # on 2 cores took each other's CPU, and one host's stall (h1 2.30x [2.00, 2.58] beside h2's 2.69x) left
    # the two others disagreeing, so nobody could be named.
    ab = json.dumps({"k25_ab": ["vllm-eagle3", "sglang-eagle3"], "k25_ab_benchmark": AB, "k25_serial": 1})
    try:
        played = play(hosts, "experiment", "-e", ab)
    finally:
        h3.restore_profile("sglang-eagle3", kept)
    assert played.rc == 0, played.out
    ratios = {}
    for m in fleet:
        (exp,) = m.api.client.get("/experiments", params={"limit": 1}).json()
        assert exp["outcome"] == "ok", exp
        assert any(v.startswith("sglang-eagle3: faster") for v in exp["verdicts"]), exp["verdicts"]
        assert m.serving()[1] == before[m.name]  # each host got its profile back
        ratios[m.name] = _speedup(played.out, m.name)
    print(f"per-host speed-ups: {ratios}")
    assert ratios["h3"] < min(ratios["h1"], ratios["h2"]) * 0.95, (ratios, [_ab_sides(m) for m in fleet])
    line = re.search(r"sglang-eagle3: faster on 3 of 3 hosts \(speed-up .*", played.out)
    assert line is not None, played.out[-3000:]
    named = re.findall(r"(h\d) disagrees", line.group(0))
    assert named == ["h3"], line.group(0)
    fleet_ratio, low, high = map(
        float, re.findall(r"fleet ([0-9.]+)x \[([0-9.]+), ([0-9.]+)\]", line.group(0))[0]
    )
    assert low < fleet_ratio < high
    assert min(ratios.values()) - 0.01 <= fleet_ratio <= max(ratios.values()) + 0.01, (fleet_ratio, ratios)


def _ab_sides(m: Member) -> list[tuple[str, str, object, object]]:
    """The host's two A/B benchmarks as it recorded them: profile, the engine's --rate, throughput, and
    whether other traffic shared the engine. A fresh-clone CI once read h3 at 2.65x [2.47, 2.74] against
    2.70x (a planted 0.9 rate then read 2.42x beside three busy loops): which side moved is the clue."""
    sides = []
    for b in m.api.client.get("/benchmarks", params={"limit": 2}).json():
        argv = (b.get("provenance") or {}).get("argv") or []
        rate = argv[argv.index("--rate") + 1] if "--rate" in argv else "?"
        sides.append((b["profile"], rate, b["output_throughput"], b["other_traffic"]))
    return sides


def _speedup(out: str, host: str) -> float:
    """The host's own speed-up of sglang-eagle3 as its experiment task returned it (-v output)."""
    found = re.search(rf"{host}: sglang-eagle3 ([0-9.]+)x", out)
    assert found is not None, out[-3000:]
    return float(found.group(1))


def test_a_host_that_came_back_slower_is_found(fleet: list[Member], tmp_path: Path) -> None:
    """Each host benchmarks the baseline three times (its normal: their median); host 3's engine then runs
    at half its rate (as a throttling GPU would make it), and each host benchmarks once more: Prometheus's
    K25HostSlower fires for host 3 only, and the dashboard's ranking puts it first. The hosts work at
    once, each on its own. The benchmarks run ~5 s (RELATIVE), and the normal is a median, as the
    daemon's is: hosts 1 and 2 must read within 10% of it, which a stall of this busy machine took from
    one benchmark of 1.7 s (the gate's SPEC), and from a normal of one 5 s benchmark (h2 read 1.12)."""
    h3 = fleet[2]

    def normal(m: Member) -> None:
        m.api.activate("baseline")
        for _ in range(3):
            _bench(m)

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(normal, fleet))
    h3.edit_argv("baseline", with_option("--rate", f"{rate_of(h3, 'baseline') * 0.5:g}"))
    h3.api.activate("baseline", force=True)
    with ThreadPoolExecutor(3) as pool:
        ratios = dict(
            zip(
                (m.name for m in fleet),
                (b["relative"]["ratio"] for b in pool.map(_bench, fleet)),
                strict=True,
            )
        )
    print(f"relative throughput: {ratios}")
    assert ratios["h3"] < 0.7, ratios
    assert all(0.9 <= ratios[m.name] <= 1.1 for m in fleet[:2]), ratios
    with prometheus(tmp_path, [m.info.url for m in fleet]) as prom:

        def firing() -> list[str]:
            alerts = prom.get("/api/v1/alerts").json()["data"]["alerts"]
            return sorted(a["labels"]["instance"] for a in alerts
                          if a["labels"]["alertname"] == "K25HostSlower" and a["state"] == "firing")  # fmt: skip

        eventually_sync(lambda: len(query(prom, "k25_host_relative_throughput")) == 3, what="3 hosts scraped")
        eventually_sync(firing, what="K25HostSlower fires", within_s=30)
        assert firing() == [h3.info.url.removeprefix("http://")]
        ranked = query(prom, 'sort(k25_host_relative_throughput{instance=~".*"})')
        assert ranked[0]["metric"]["instance"] == h3.info.url.removeprefix("http://")


def _bench(m: Member) -> Any:
    r = m.api.client.post("/benchmarks", json=RELATIVE)
    assert r.status_code == 202, r.text
    assert m.api.wait_run(r.json()["run_id"])["outcome"] == "ok"
    return m.api.client.get(f"/benchmarks/{r.json()['run_id']}").json()


def test_the_collections_integration_targets_pass_against_a_sandboxed_host(fleet: list[Member]) -> None:
    """Issue 54: the collection's own integration targets (tests/integration/targets/<module>), run by
    `ansible-test integration` as a collection's CI runs them, against host 1's sandboxed daemon (docker-
    less: the modules run on the controller and call the daemon on loopback)."""
    h1 = fleet[0]
    config = COLLECTION / "tests/integration/integration_config.yml"
    config.write_text(f"k25_url: {h1.info.url}\nk25_token_file: {h1.info.token_file}\n")
    try:
        out = ansible_test("integration", "--venv")
    finally:
        config.unlink()
    ran = set(re.findall(r"Running (k25_\w+) integration test role", out))
    assert ran == {"k25_status_info", "k25_profile", "k25_benchmark", "k25_experiment"}, ran
