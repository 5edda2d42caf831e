"""Rollouts that lose a host (issue 54): three sandboxed hosts through the k25.ctl collection's rollout
playbook, as in test_fleet.py, each fault on its own: hosts unreachable from the start (the rollout does not
begin), a host slower than its own normal (its gate fails: it and the hosts done before it get their
previous profile back, as `k25_done_on_failure=restore` says, and the play says where each host stands),
and a host whose daemon is killed during its switch, behind HAProxy with clients that notice nothing."""

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
from tests.fleet import SPEC, Member, host_line, play, rate_of, with_option
from tests.sandboxing import kill_daemon
from tests.waiting import eventually_sync

pytestmark = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="haproxy: scripts/setup.sh installs it"
)
TARGET = "vllm-eagle3"


def _summary(out: str) -> dict[str, str]:
    """The rescue's "Where each host stands": host -> its line."""
    return dict(re.findall(r'"msg": "(h\d): (.*)"', out))


def test_hosts_unreachable_from_the_start_stop_the_rollout_before_it_begins(
    fleet: list[Member], hosts: Path
) -> None:
    """h4 cannot be reached (ssh to a closed port: Ansible's UNREACHABLE), h5's daemon does not answer (its
    API on a closed port): the first play fails them by name and no host moves."""
    lines = [host_line(m) for m in fleet] + [
        f"h4 ansible_connection=ssh ansible_host=127.0.0.1 ansible_port={free_port()} ansible_user=root "
        "ansible_ssh_common_args='-o ConnectTimeout=5 -o StrictHostKeyChecking=no'",
        host_line(fleet[0])
        .replace("h1 ", "h5 ")
        .replace(fleet[0].info.url, f"http://127.0.0.1:{free_port()}"),
    ]
    wider = hosts.parent / "wider.ini"
    wider.write_text("\n".join(["[k25]", *lines]) + "\n")
    last = {m.name: m.last_run() for m in fleet}
    played = play(wider, "rollout", "-e", f"k25_profile={TARGET}")
    assert played.rc != 0, played.out
    assert re.search(r"h4 is unreachable \(.*\): the rollout of vllm-eagle3 does not begin", played.out), (
        played.out[-3000:]
    )
    assert "h5 does not answer (" in played.out
    assert [played.recap[h]["failed"] for h in ("h4", "h5")] == [1, 1], played.recap
    assert all(played.recap[m.name]["changed"] == 0 for m in fleet), played.recap
    assert all(m.switches(last[m.name]) == [] for m in fleet)
    assert all(m.serving() == ("active", "baseline") for m in fleet)


def test_a_host_slower_than_its_own_normal_fails_its_gate_and_the_done_hosts_roll_back(
    fleet: list[Member], hosts: Path
) -> None:
    """Each host has a normal for vllm-eagle3 (one benchmark of the gate's spec); host 2's engine then runs
    at half its rate. With `k25_done_on_failure=restore`, host 1 (switched and gated) and host 2 (its gate
    failed) get baseline back, host 3 is untouched, and the summary says so for each."""
    h1, h2, h3 = fleet

    def normal(m: Member) -> None:
        m.api.activate(TARGET)
        r = m.api.client.post("/benchmarks", json=SPEC)
        assert r.status_code == 202, r.text
        assert m.api.wait_run(r.json()["run_id"])["outcome"] == "ok"
        m.api.activate("baseline")

    with ThreadPoolExecutor(3) as pool:
        list(pool.map(normal, fleet))
    last = {m.name: m.last_run() for m in fleet}
    kept = h2.edit_argv(TARGET, with_option("--rate", f"{rate_of(h2, TARGET) * 0.5:g}"))
    gate = json.dumps({"k25_gate_benchmark": SPEC, "k25_gate_max_drop_percent": 30})
    try:
        played = play(hosts, "rollout", "-e", f"k25_profile={TARGET}", "-e", gate,
                      "-e", "k25_done_on_failure=restore")  # fmt: skip
    finally:
        h2.restore_profile(TARGET, kept)
    assert played.rc != 0, played.out
    for m in (h1, h2):
        there, back = m.switches(last[m.name])
        assert (there["profile"], there["outcome"], back["profile"], back["outcome"]) == (
            TARGET, "active", "baseline", "active"
        ), (there, back)  # fmt: skip
        assert m.serving() == ("active", "baseline")
    (failed,) = [b for b in _gates(h2, TARGET) if b["run_id"] > last["h2"]]
    judged = h2.api.client.get(f"/benchmarks/{failed['run_id']}").json()["gate"]
    assert judged["passed"] is False, judged
    assert h3.switches(last["h3"]) == []
    assert h3.serving() == ("active", "baseline")
    summary = _summary(played.out)
    print(summary)
    assert summary["h1"].startswith("had vllm-eagle3 (gated), restored to baseline"), summary
    assert summary["h1"].endswith(": active"), summary
    assert summary["h2"] == "failed vllm-eagle3, restored to baseline; now active on baseline", summary
    assert summary["h3"] == "not reached, still on baseline", summary
    assert "h2 failed vllm-eagle3 (restored to baseline)" in played.out
    assert "of this host's normal" in played.out  # the gate's words: why it failed


def _gates(m: Member, profile: str) -> list[Any]:
    """The host's gate benchmarks of the profile (their spec names the gate), newest first."""
    found = m.api.client.get("/benchmarks", params={"profile": profile, "limit": 50}).json()
    return [b for b in found if (b.get("spec") or {}).get("gate")]


def test_a_host_lost_mid_switch_stops_the_rollout_in_words_and_the_rerun_gates_it(
    fleet: list[Member], hosts: Path
) -> None:
    """Issue 55: host 2's daemon is killed (SIGKILL) while its engine loads the new profile; systemd starts
    it again and it finishes the switch by itself. The play stops at host 2 with a message in words; with
    `k25_on_failure=keep` host 2 keeps the profile the daemon finished, ungated, and host 3 is untouched.
    The re-run gates host 2 (it serves the profile without a passing gate) before it moves host 3. No
    request through HAProxy fails."""
    h1, h2, h3 = fleet
    target = TARGET
    lenient = json.dumps({"k25_gate_benchmark": SPEC, "k25_gate_max_drop_percent": 60})
    servers = [Host(m.name, m.service_port, m.info.port) for m in fleet]
    with haproxy(servers, free_port(), inter="500ms") as proxy:
        eventually_sync(lambda: all(s["status"] == "UP" for s in proxy.servers().values()), what="all UP")
        if h1.serving()[1] == target:  # every host starts elsewhere: each has a switch to make
            h1.api.activate("baseline")
        for m in (h2, h3):
            if m.serving()[1] == target:
                m.api.activate("baseline")
        last = {m.name: m.last_run() for m in fleet}
        with Load(proxy.url, clients=8, max_tokens=64) as load:
            eventually_sync(lambda: load.count() >= 16, what="traffic flows")
            kept = h2.edit_argv(
                target, with_option("--load-seconds", "8.0")
            )  # the known answer is of this file
            try:
                with ThreadPoolExecutor(1) as pool:
                    args = ("-e", f"k25_profile={target}", "-e", lenient, "-e", "k25_on_failure=keep")
                    first = pool.submit(play, hosts, "rollout", *args)

                    def loading() -> bool:
                        return any(r["kind"] == "switch" and r["profile"] == target and r["phase"] == "loading"
                                   and r["outcome"] == "running" for r in h2.runs() if r["id"] > last["h2"])  # fmt: skip

                    eventually_sync(loading, what="host 2 loads the new profile", within_s=180)
                    kill_daemon(h2.api, h2.info)
                    cut = first.result()
                assert cut.rc != 0, cut.out
                assert "closed the connection during the switch to vllm-eagle3" in cut.out, cut.out[-3000:]
                assert "resumed the switch to vllm-eagle3" in cut.out
                assert "IncompleteRead" not in cut.out
                assert cut.recap["h2"]["failed"] == 1
                interrupted, resumed = h2.switches(last["h2"])
                assert interrupted["outcome"] == "interrupted"
                assert (resumed["parent_id"], resumed["outcome"]) == (interrupted["id"], "active")
                assert h2.serving() == ("active", target)  # kept, as the policy says, and not gated
                assert h3.switches(last["h3"]) == []  # the play stopped at host 2
                assert _summary(cut.out) == {
                    "h1": "vllm-eagle3, switched and gated, kept",
                    "h2": "failed vllm-eagle3, left as the daemon left it; now active on vllm-eagle3",
                    "h3": "not reached, still on baseline",
                }, cut.out[-3000:]
                h2_gates = len(_gates(h2, target))

                again = play(hosts, "rollout", "-e", f"k25_profile={target}", "-e", lenient)
            finally:
                h2.restore_profile(target, kept)
            assert again.rc == 0, again.out
            assert again.recap["h1"]["changed"] == 0  # switched and gated in the first play
            gate = _gates(h2, target)
            assert len(gate) == h2_gates + 1  # host 2 was gated now, on the activation it had
            assert gate[0]["serving_run_id"] == h2.api.status()["serving_run_id"]
            (moved,) = h3.switches(last["h3"])
            assert gate[0]["ended_at"] < moved["started_at"]  # before the play went on to host 3
            assert h3.serving() == ("active", target)
    failed_requests = load.failed()
    print(f"through haproxy: {load.count()} requests, {len(failed_requests)} failed")
    assert failed_requests == [], failed_requests[:5]
