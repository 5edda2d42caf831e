"""Parking against real fake engines in a sandbox of its own: the baseline (park = "sleep", a slow cold
start) sleeps through an experiment and comes back by a wake, same process, no weight loading, in a
fraction of its cold start; each engine fault and each guard ends in the normal switch with the reason on
the run; a daemon restart readopts the parked engine; unpark and a crash while parked free it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.parking_host import (
    BASELINE_UNIT,
    MIB,
    cli,
    cold_or_woken,
    details,
    journal,
    main_pid,
    park_and_wake,
    park_host,
    parked_profiles,
    ready_s,
    restart,
    switch,
    unpark_all,
)
from tests.sandboxing import Api, inside


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with park_host(tmp_path_factory) as api:
        yield api


def test_an_experiment_parks_the_baseline_and_its_restore_is_a_wake(host: Api) -> None:
    cold = switch(host, "baseline", force=True)  # a cold start to compare the wake with
    pid = main_pid(host, BASELINE_UNIT)
    body = {
        "profiles": ["vllm-eagle3"],
        "benchmark": {"concurrency": [1], "num_prompts": 2, "max_tokens": 16},
    }
    r = host.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    exp_id = r.json()["run_id"]
    seen: dict[str, Any] = {}

    def parked_while_measured() -> bool:
        if host.status()["active_profile"] == "vllm-eagle3" and (p := parked_profiles(host)):
            seen.update(p)
            seen["plan"] = host.client.get("/teardown/plan").json()
            return True
        return False

    host.wait_until(parked_while_measured, within_s=120, what="baseline parked while vllm-eagle3 serves")
    assert host.wait_run(exp_id, within_s=180)["outcome"] == "ok"
    parked = seen["baseline"]
    assert (parked["main_pid"], parked["level"]) == (pid, 1), parked
    assert parked["gpu_mib"] == {str(g): 0 for g in range(8)}, parked
    spared = [
        s
        for s in seen["plan"]["spared"]
        if s["reason"].startswith("parked profile baseline (sleeping since ")
    ]
    assert spared, seen["plan"]  # its processes; the victims are those of the engine that serves

    exp = host.client.get(f"/experiments/{exp_id}").json()
    restore = host.run(exp["restore"]["switch_run_id"])
    assert (restore["outcome"], restore["profile"]) == ("active", "baseline"), restore
    assert main_pid(host, BASELINE_UNIT) == pid  # the same process: woken, not started
    stages = restore["load_stages"] or {}
    assert "wake" in stages, stages
    assert "weights" not in stages, stages
    assert not any(d.startswith(BASELINE_UNIT) for d in details(restore, "start"))
    woke, started = ready_s(restore, "waking"), ready_s(cold, "start")
    print(f"baseline ready: cold start {started:.2f}s, wake {woke:.2f}s, ratio {woke / started:.3f}")
    assert woke <= 0.2 * started
    st = host.status()
    assert (st["state"], st["active_profile"], st["parked"]) == ("active", "baseline", [])


def test_a_daemon_restart_readopts_the_parked_engine(host: Api) -> None:
    switch(host, "baseline")
    pid = main_pid(host, BASELINE_UNIT)
    switch(host, "vllm-eagle3")
    assert "baseline" in parked_profiles(host)
    old = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert inside(host.info, "systemctl", "restart", "k25-ctl.service").returncode == 0
    host.wait_until(lambda: parked_profiles(host).get("baseline", {}).get("main_pid") == pid, within_s=60,
                    what="the restarted daemon readopts baseline as parked")  # fmt: skip
    new = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert new != old
    st = host.status()
    assert (st["state"], st["active_profile"], st["conflicts"]) == ("active", "vllm-eagle3", [])
    back = switch(host, "baseline")
    assert "wake" in (back["load_stages"] or {})
    assert main_pid(host, BASELINE_UNIT) == pid
    # The known answer came from SQLite: the restarted daemon checked the wake against it.
    assert any(d.startswith("known answer equal to run ") for d in details(back, "waking")), details(back)


def test_unpark_stops_the_parked_engine(host: Api) -> None:
    switch(host, "vllm-eagle3")
    assert "baseline" in parked_profiles(host)
    shown = cli(host, "status")
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"^parked +baseline since .* \(level 1, main PID \d+\): 0 MiB on 8 GPU\(s\)", shown.stdout, re.M
    )
    assert re.search(r"^baseline .*\(parked\)$", cli(host, "profiles").stdout, re.M)
    r = cli(host, "unpark", "baseline")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"run \d+ unpark baseline: ok: stopped parked baseline: freed ", r.stdout), r.stdout
    run = host.client.get("/runs", params={"profile": "baseline", "limit": 1}).json()[0]
    assert (run["kind"], run["outcome"]) == ("unpark", "ok"), run
    assert parked_profiles(host) == {}
    assert main_pid(host, BASELINE_UNIT) == 0
    assert host.client.post("/profiles/baseline/unpark").status_code == 404
    profiles = {p["name"]: p for p in host.client.get("/profiles").json()}
    assert profiles["baseline"]["parked"] is False


def test_a_crash_while_parked_is_recorded_and_clears_it(host: Api) -> None:
    switch(host, "baseline")
    switch(host, "vllm-eagle3")
    assert "baseline" in parked_profiles(host)
    assert inside(host.info, "systemctl", "kill", "-s", "KILL", BASELINE_UNIT).returncode == 0
    host.wait_until(lambda: parked_profiles(host) == {}, what="the crashed parked engine forgotten")

    def ended() -> Any:  # the parked state clears as the crash is seen; the run's end is written after it
        runs = host.client.get("/runs", params={"profile": "baseline", "limit": 3}).json()
        crash = next(r for r in runs if r["kind"] == "external")
        return crash if crash["outcome"] != "running" else None

    crash = host.wait_until(ended, what="the crash's run ended")
    assert crash["outcome"] == "crashed", crash
    assert "while parked" in crash["error"], crash
    st = host.status()
    assert (st["state"], st["active_profile"]) == ("active", "vllm-eagle3")


@pytest.mark.parametrize(
    ("parked", "why"),
    [
        ("keeps", "not parked: GPU memory still held after the sleep answered 200"),
        ("bigger", "not parked: bigger needs 143771 MiB on GPU 0"),
    ],
)
def test_a_refused_park_stops_the_engine_the_normal_way(host: Api, parked: str, why: str) -> None:
    """sleep-keeps-memory: /sleep says 200 and the GPUs stay full; bigger: the target cannot fit beside the
    baseline's allowed residual. Either way the switch is done by a stop, with the figures on the run."""
    leave, target = ("keeps", "vllm-eagle3") if parked == "keeps" else ("baseline", "bigger")
    unpark_all(host)
    switch(host, leave)
    run = switch(host, target)
    assert any(d.startswith(why) for d in details(run, "parking")), details(run)
    assert any(d.startswith(f"stopping {leave if leave != 'baseline' else BASELINE_UNIT}")
               or leave in d for d in details(run, "stop"))  # fmt: skip
    assert parked_profiles(host) == {}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("wakefail", "wake failed: POST /wake_up answered HTTP 500"),
        ("speczero", "wake failed: the probe after the wake accepted no draft token"),
    ],
)
def test_a_failed_wake_falls_back_to_a_cold_start(host: Api, name: str, why: str) -> None:
    unpark_all(host)
    switch(host, name)
    pid = main_pid(host, f"k25-engine@{name}.service")
    switch(host, "vllm-eagle3")
    assert name in parked_profiles(host)
    run = switch(host, name)
    assert any(d.startswith(f"stopping parked {name}: {why}") for d in details(run, "stop")), details(run)
    assert main_pid(host, f"k25-engine@{name}.service") != pid  # started cold
    assert f"k25-engine@{name}.service" in details(run, "start")
    assert parked_profiles(host) == {}


def test_the_ram_guard_refuses_with_figures(host: Api) -> None:
    config = Path(host.info.config)
    text = config.read_text()
    config.write_text(text.replace("park_ram_reserve_bytes = 268435456", f"park_ram_reserve_bytes = {2**50}"))
    try:
        restart(host)
        unpark_all(host)
        switch(host, "baseline")
        run = switch(host, "vllm-eagle3")
        assert any(d.startswith("not parked: the weights (") and "park_ram_reserve_bytes keeps 1048576.0 GiB" in d
                   for d in details(run, "parking")), details(run)  # fmt: skip
        assert parked_profiles(host) == {}
        assert main_pid(host, BASELINE_UNIT) == 0
    finally:
        config.write_text(text)
        restart(host)


@pytest.mark.web
def test_the_page_shows_the_parked_engine_and_unparks_it(host: Api, page: Any) -> None:
    unpark_all(host)
    switch(host, "baseline")
    switch(host, "vllm-eagle3")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept(host.info.token))  # the token prompt, answered once
    page.goto(host.info.url + "/")
    page.wait_for_function("document.getElementById('parked').textContent.startsWith('parked: baseline since ')",
                           timeout=15000)  # fmt: skip
    assert "(0 MiB GPU, " in page.text_content("#parked")
    # baseline's weights are empty files: nothing pinned, in the sandbox's 2.5 MiB budget
    assert page.text_content("#park-budget") == "park RAM budget: 0.0 MiB pinned of 2.5 MiB"
    # The host's park rates and each parking profile's ways (issue 51), from GET /host.
    page.wait_for_function(
        "document.getElementById('park-ways').textContent.includes('level 1, first park (registered pinning)')",
        timeout=15000,
    )
    assert "documented defaults (never calibrated" in page.text_content("#host-rates")
    rows = page.locator("#park-ways tr").all_text_contents()
    assert any(r.startswith("pa 1.0 MiB, ") for r in rows), rows
    page.click("button[data-unpark='baseline']")
    page.wait_for_function("document.getElementById('parked').textContent === ''", timeout=30000)
    page.wait_for_function("document.querySelectorAll('button[data-unpark]').length === 0", timeout=30000)
    assert parked_profiles(host) == {}
    assert errors == []


def test_an_sglang_command_without_the_cpu_backup_is_refused(host: Api) -> None:
    shown = host.client.get("/profiles/sgnobackup").json()
    assert shown["valid"] is False
    assert "lacks --enable-weights-cpu-backup" in shown["error"]
    assert "sgl-project/sglang#6367, #19442" in shown["error"]
    r = host.client.post("/profiles/sgnobackup/activate")
    assert r.status_code == 404
    assert "lacks --enable-weights-cpu-backup" in r.json()["detail"]
    checked = cli(host, "check-profiles")
    assert "sgnobackup" in checked.stdout + checked.stderr
    assert "lacks --enable-weights-cpu-backup" in checked.stdout + checked.stderr


def test_sglang_parks_and_resumes_with_the_same_process_and_answer(host: Api) -> None:
    argv = host.client.get("/profiles/sgpark").json()["argv"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"], argv  # rendered, not a command
    assert argv[-2:] == ["--enable-memory-saver", "--enable-weights-cpu-backup"], argv
    pid, back = park_and_wake(host, "sgpark")
    assert main_pid(host, "k25-engine@sgpark.service") == pid
    assert "resume memory occupation" in journal(host, "k25-engine@sgpark.service")
    assert any(d.startswith("known answer equal to run ") for d in details(back, "waking")), details(back)
    assert {"wake", "known_answer"} <= set(back["load_stages"] or {})


def test_vllm_level_2_wakes_through_reload_weights(host: Api) -> None:
    pid, back = park_and_wake(host, "level2")
    assert main_pid(host, "k25-engine@level2.service") == pid
    calls = [
        line
        for line in journal(host, "k25-engine@level2.service")
        if line.startswith(("sleep: level", "wake up the engine with tags", "collective_rpc"))
    ]
    assert calls[-4:] == [
        "sleep: level 2",
        "wake up the engine with tags: ['weights']",
        "collective_rpc: reload_weights",
        "wake up the engine with tags: ['kv_cache']",
    ], calls
    assert {"wake", "reload", "known_answer"} <= set(back["load_stages"] or {}), back["load_stages"]
    assert any(d.startswith("known answer equal to run ") for d in details(back, "waking")), details(back)


def test_an_engine_without_reload_weights_is_started_cold(host: Api) -> None:
    pid, back = park_and_wake(host, "norpc")
    why = "wake failed: POST /collective_rpc answered HTTP 404: the engine does not serve reload_weights"
    assert any(d.startswith(f"stopping parked norpc: {why}") for d in details(back, "stop")), details(back)
    assert main_pid(host, "k25-engine@norpc.service") != pid
    assert back["outcome"] == "active"


def test_auto_parks_two_profiles_on_the_same_weights_at_level_1_then_level_2(host: Api) -> None:
    """Issue 51, in the sandbox: aa parks first (nothing else parked, its pinned bytes fit): level 1, a
    fast wake. ab, on the same weight files (resident in the page cache), parks beside it: level 2, nothing
    pinned; each run says which, why and both ways' predictions. ab's wake reloads its weights."""
    unpark_all(host)
    switch(host, "aa")
    first = next(d for d in details(switch(host, "ab"), "parking") if d.startswith("park_level auto"))
    assert first.startswith("park_level auto: level 1, a fast wake"), first
    second = next(
        d for d in details(switch(host, "vllm-eagle3"), "parking") if d.startswith("park_level auto")
    )
    why = "park_level auto: level 2, its weights are resident in the page cache and shared with parked aa"
    assert second.startswith(why), second
    assert re.search(r"\(predicted level 1: park [\d.]+s, wake [\d.]+s, [\d.]+ GB pinned; level 2: ", second)
    assert {n: p["level"] for n, p in parked_profiles(host).items()} == {"aa": 1, "ab": 2}
    back = switch(host, "ab")
    assert {"wake", "reload", "known_answer"} <= set(back["load_stages"] or {}), back["load_stages"]
    unpark_all(host)


def test_two_engines_park_at_once_and_a_third_evicts_the_least_recently_parked(host: Api) -> None:
    unpark_all(host)
    for name in ("pa", "pb", "pc"):
        switch(host, name)
    assert set(parked_profiles(host)) == {"pa", "pb"}  # 2 MiB pinned in a 2.5 MiB budget
    st = host.status()
    assert st["park_budget"] == {"budget_bytes": int(2.5 * MIB), "used_bytes": 2 * MIB}
    metrics = {s.name: s.value for f in text_string_to_metric_families(host.client.get("/metrics").text)
               for s in f.samples}  # fmt: skip
    assert metrics["k25_park_ram_budget_bytes"] == int(2.5 * MIB)
    assert metrics["k25_park_ram_pinned_bytes"] == 2 * MIB
    run = switch(host, "vllm-eagle3")  # pc parks: pa, parked first, makes room
    why = (
        "stopping parked pa: least recently used: parking pc pins 1.0 MiB and park_ram_budget_bytes (2.5 MiB)"
    )
    assert any(d.startswith(why) for d in details(run, "stop")), details(run)
    assert set(parked_profiles(host)) == {"pb", "pc"}
    assert main_pid(host, "k25-engine@pa.service") == 0
    assert "wake" in (switch(host, "pb")["load_stages"] or {})  # still one wake away


def test_a_budget_too_small_for_any_park_stops_the_engine_as_before(host: Api) -> None:
    config = Path(host.info.config)
    text = config.read_text()
    config.write_text(
        text.replace(f"park_ram_budget_bytes = {int(2.5 * MIB)}", f"park_ram_budget_bytes = {MIB // 2}")
    )
    try:
        restart(host)
        unpark_all(host)
        switch(host, "pa")
        run = switch(host, "vllm-eagle3")
        why = "not parked: the weights (1.0 MiB) would be pinned in host RAM, but park_ram_budget_bytes is 0.5 MiB"
        assert any(d.startswith(why) for d in details(run, "parking")), details(run)
        assert parked_profiles(host) == {}
        assert main_pid(host, "k25-engine@pa.service") == 0
    finally:
        config.write_text(text)
        restart(host)


def test_an_experiment_in_rounds_starts_each_profile_cold_once_and_wakes_it_after(host: Api) -> None:
    """pa and pb in 4 rounds (ABBA): each starts cold once; every later switch to it is a wake. The result
    has each round's figures, the comparison's intervals and the verdict in the last event."""
    unpark_all(host)
    body = {
        "profiles": ["pa", "pb"],
        "rounds": 4,
        "benchmark": {"concurrency": [2], "num_prompts": 8, "max_tokens": 16, "warmups": 0},
    }
    r = host.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    run = host.wait_run(r.json()["run_id"], within_s=300)
    exp = host.client.get(f"/experiments/{run['id']}").json()
    assert run["outcome"] == "ok", exp
    assert exp["orders"] == [["pa", "pb"], ["pb", "pa"], ["pa", "pb"], ["pb", "pa"]]
    switches = [(s["profile"], s["switch_run_id"]) for s in exp["steps"] if s["switch_run_id"] is not None]
    how = [(name, cold_or_woken(host, sid)) for name, sid in switches]
    print("the experiment's switches:", how)
    assert how == [("pa", "cold"), ("pb", "cold"), ("pa", "woken"), ("pb", "woken"), ("pa", "woken")]
    restore = host.run(exp["restore"]["switch_run_id"])
    assert (restore["outcome"], restore["profile"]) == ("active", "vllm-eagle3")
    assert [(x["round"], x["profile"]) for x in exp["rounds"]] == [
        (r, name) for r, order in enumerate(exp["orders"]) for name in order
    ]
    assert all(x["output_throughput"] > 0 for x in exp["rounds"])
    pb = {x["profile"]: x for x in exp["comparison"]["rows"]}["pb"]
    judged = pb["judged"]["throughput"]
    assert judged["samples"] == [32, 32]  # 8 requests a round, 4 rounds, pooled
    assert judged["low"] <= judged["ratio"] <= judged["high"]
    assert exp["verdicts"][0] == f"pb: {pb['verdict_text']}"
    assert exp["verdicts"][0] in run["events"][-1]["detail"]
