"""Parking against real fake engines in a sandbox of its own: the baseline (park = "sleep", a slow cold
start) sleeps through an experiment and comes back by a wake, same process, no weight loading, in a
fraction of its cold start; each engine fault and each guard ends in the normal switch with the reason on
the run; a daemon restart readopts the parked engine; unpark and a crash while parked free it."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemon.core.command import k25_command
from daemon.sandbox import sandbox as sbx
from daemon.sandbox.layout import fake_engine_profile, free_port, make_models
from daemon.sandbox.rendered import rendered_profile, write_engine_shims
from tests.sandboxing import Api, inside

BASELINE_UNIT = "vllm-kimi-k25-int4.service"
COLD_LOAD_S = 8.0
SPEC = {"k": 3, "acceptance": 0.5}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    extra, models = tmp_path_factory.mktemp("park-profiles"), tmp_path_factory.mktemp("park-models")
    make_models(models)

    def write(name: str, **kw: Any) -> None:
        kw.setdefault("flavor", "vllm")
        kw.setdefault("load_seconds", 1.0)
        (extra / f"{name}.toml").write_text(fake_engine_profile(name, port=free_port(), models=models, **kw))

    # The default profile parks: an 8 s cold start, a wake at 100 GB/s (68 GiB of fake weights: 0.7 s).
    write("baseline", unit=BASELINE_UNIT, load_seconds=COLD_LOAD_S, park="sleep", wake_gbps=100.0)
    write("keeps", park="sleep", faults=("sleep-keeps-memory",))
    write("wakefail", park="sleep", faults=("wake-fails",))
    write("speczero", park="sleep", spec=SPEC, faults=("wake-zero-acceptance",))
    write("bigger", settings={"memory_fraction": "1.0"})  # needs every MiB of each GPU
    # The known answer (a wake is proven by the tokens, not by liveness).
    # Rendered (no `command`): k25-ctl's own argv for SGLang, answered by the fake engine through a shim.
    shims = write_engine_shims(tmp_path_factory.mktemp("park-shims"))
    sgpark = rendered_profile(
        "sgpark",
        flavor="sglang",
        port=free_port(),
        model=models / "Kimi-K2.5-INT4",
        shims=shims,
        fake_args=("--load-seconds", "1"),
        park="release",
    )
    (extra / "sgpark.toml").write_text(sgpark)
    write("sgnobackup", flavor="sglang", park="release", park_flags=("--enable-memory-saver",))
    write("level2", park="sleep", settings={"park_level": "2"})
    write("norpc", park="sleep", settings={"park_level": "2"}, faults=("no-collective-rpc",))
    write("corrupt", park="sleep", faults=("wake-corrupts",))
    info = sbx.up(profiles=extra, load_seconds=1.0, binds=(models,))
    try:
        yield Api(info)
    finally:
        sbx.down(info)


def _main_pid(api: Api, unit: str) -> int:
    return int(inside(api.info, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip())


def _cli(host: Api, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"K25_CONFIG": host.info.config, "PATH": "/usr/bin:/bin"}
    return subprocess.run([*k25_command(), *args], capture_output=True, text=True, timeout=120, env=env)


def _details(run: Any, phase: str | None = None) -> list[str]:
    return [e["detail"] for e in run["events"] if phase is None or e["phase"] == phase]


def _at(e: Any) -> datetime:
    return datetime.fromisoformat(e["at"])


def _ready_s(run: Any, first: str) -> float:
    """From the bring-up's first event (`start` or `waking`) to the run's end: the engine's ready time."""
    began = next(_at(e) for e in run["events"] if e["phase"] == first)
    return (datetime.fromisoformat(run["ended_at"]) - began).total_seconds()


def _switch(api: Api, name: str, *, force: bool = False) -> Any:
    """Activate `name` (already active: nothing to do, no cold start a test does not need)."""
    run = api.activate(name, force=force)
    assert run.get("outcome") == "active" or run.get("detail") == "already active", run
    return run


def _parked(api: Api) -> dict[str, Any]:
    return {p["profile"]: p for p in api.status()["parked"]}


def _unpark_all(api: Api) -> None:
    """A test's start: a profile that does not park serves, and whatever an earlier test left parked is
    stopped (max_parked = 1)."""
    _switch(api, "vllm-eagle3")
    for name in _parked(api):
        assert api.client.post(f"/profiles/{name}/unpark").status_code == 200


def test_an_experiment_parks_the_baseline_and_its_restore_is_a_wake(host: Api) -> None:
    cold = _switch(host, "baseline", force=True)  # a cold start to compare the wake with
    pid = _main_pid(host, BASELINE_UNIT)
    body = {
        "profiles": ["vllm-eagle3"],
        "benchmark": {"concurrency": [1], "num_prompts": 2, "max_tokens": 16},
    }
    r = host.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    exp_id = r.json()["run_id"]
    seen: dict[str, Any] = {}

    def parked_while_measured() -> bool:
        if host.status()["active_profile"] == "vllm-eagle3" and (p := _parked(host)):
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
    assert _main_pid(host, BASELINE_UNIT) == pid  # the same process: woken, not started
    stages = restore["load_stages"] or {}
    assert "wake" in stages, stages
    assert "weights" not in stages, stages
    assert not any(d.startswith(BASELINE_UNIT) for d in _details(restore, "start"))
    woke, started = _ready_s(restore, "waking"), _ready_s(cold, "start")
    print(f"baseline ready: cold start {started:.2f}s, wake {woke:.2f}s, ratio {woke / started:.3f}")
    assert woke <= 0.2 * started
    st = host.status()
    assert (st["state"], st["active_profile"], st["parked"]) == ("active", "baseline", [])


def test_a_daemon_restart_readopts_the_parked_engine(host: Api) -> None:
    _switch(host, "baseline")
    pid = _main_pid(host, BASELINE_UNIT)
    _switch(host, "vllm-eagle3")
    assert "baseline" in _parked(host)
    old = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert inside(host.info, "systemctl", "restart", "k25-ctl.service").returncode == 0
    host.wait_until(lambda: _parked(host).get("baseline", {}).get("main_pid") == pid, within_s=60,
                    what="the restarted daemon readopts baseline as parked")  # fmt: skip
    new = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert new != old
    st = host.status()
    assert (st["state"], st["active_profile"], st["conflicts"]) == ("active", "vllm-eagle3", [])
    back = _switch(host, "baseline")
    assert "wake" in (back["load_stages"] or {})
    assert _main_pid(host, BASELINE_UNIT) == pid
    # The known answer came from SQLite: the restarted daemon checked the wake against it.
    assert any(d.startswith("known answer equal to run ") for d in _details(back, "waking")), _details(back)


def test_unpark_stops_the_parked_engine(host: Api) -> None:
    _switch(host, "vllm-eagle3")
    assert "baseline" in _parked(host)
    shown = _cli(host, "status")
    assert shown.returncode == 0, shown.stderr
    assert re.search(
        r"^parked +baseline since .* \(level 1, main PID \d+\): 0 MiB on 8 GPU\(s\)", shown.stdout, re.M
    )
    assert re.search(r"^baseline .*\(parked\)$", _cli(host, "profiles").stdout, re.M)
    r = _cli(host, "unpark", "baseline")
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.match(r"run \d+ unpark baseline: ok: stopped parked baseline: freed ", r.stdout), r.stdout
    run = host.client.get("/runs", params={"profile": "baseline", "limit": 1}).json()[0]
    assert (run["kind"], run["outcome"]) == ("unpark", "ok"), run
    assert _parked(host) == {}
    assert _main_pid(host, BASELINE_UNIT) == 0
    assert host.client.post("/profiles/baseline/unpark").status_code == 404
    profiles = {p["name"]: p for p in host.client.get("/profiles").json()}
    assert profiles["baseline"]["parked"] is False


def test_a_crash_while_parked_is_recorded_and_clears_it(host: Api) -> None:
    _switch(host, "baseline")
    _switch(host, "vllm-eagle3")
    assert "baseline" in _parked(host)
    assert inside(host.info, "systemctl", "kill", "-s", "KILL", BASELINE_UNIT).returncode == 0
    host.wait_until(lambda: _parked(host) == {}, what="the crashed parked engine forgotten")
    runs = host.client.get("/runs", params={"profile": "baseline", "limit": 3}).json()
    crash = next(r for r in runs if r["kind"] == "external")
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
    _unpark_all(host)
    _switch(host, leave)
    run = _switch(host, target)
    assert any(d.startswith(why) for d in _details(run, "parking")), _details(run)
    assert any(d.startswith(f"stopping {leave if leave != 'baseline' else BASELINE_UNIT}")
               or leave in d for d in _details(run, "stop"))  # fmt: skip
    assert _parked(host) == {}


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("wakefail", "wake failed: POST /wake_up answered HTTP 500"),
        ("speczero", "wake failed: the probe after the wake accepted no draft token"),
    ],
)
def test_a_failed_wake_falls_back_to_a_cold_start(host: Api, name: str, why: str) -> None:
    _unpark_all(host)
    _switch(host, name)
    pid = _main_pid(host, f"k25-engine@{name}.service")
    _switch(host, "vllm-eagle3")
    assert name in _parked(host)
    run = _switch(host, name)
    assert any(d.startswith(f"stopping parked {name}: {why}") for d in _details(run, "stop")), _details(run)
    assert _main_pid(host, f"k25-engine@{name}.service") != pid  # started cold
    assert f"k25-engine@{name}.service" in _details(run, "start")
    assert _parked(host) == {}


def test_the_ram_guard_refuses_with_figures(host: Api) -> None:
    config = Path(host.info.config)
    text = config.read_text()
    config.write_text(text.replace("park_ram_reserve_bytes = 268435456", f"park_ram_reserve_bytes = {2**50}"))
    try:
        _restart(host)
        _unpark_all(host)
        _switch(host, "baseline")
        run = _switch(host, "vllm-eagle3")
        assert any(d.startswith("not parked: the weights (") and "park_ram_reserve_bytes keeps 1048576.0 GiB" in d
                   for d in _details(run, "parking")), _details(run)  # fmt: skip
        assert _parked(host) == {}
        assert _main_pid(host, BASELINE_UNIT) == 0
    finally:
        config.write_text(text)
        _restart(host)


def _restart(host: Api) -> None:
    old = inside(host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service").stdout.strip()
    assert inside(host.info, "systemctl", "restart", "k25-ctl.service").returncode == 0
    host.wait_until(
        lambda: (
            inside(
                host.info, "systemctl", "show", "-p", "MainPID", "--value", "k25-ctl.service"
            ).stdout.strip()
            not in ("0", old)
            and host.client.get("/healthz").status_code == 200
        ),
        what="daemon restarted",
    )


@pytest.mark.web
def test_the_page_shows_the_parked_engine_and_unparks_it(host: Api, page: Any) -> None:
    _unpark_all(host)
    _switch(host, "baseline")
    _switch(host, "vllm-eagle3")
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: d.accept(host.info.token))  # the token prompt, answered once
    page.goto(host.info.url + "/")
    page.wait_for_function("document.getElementById('parked').textContent.startsWith('parked: baseline since ')",
                           timeout=15000)  # fmt: skip
    assert "(0 MiB GPU, " in page.text_content("#parked")
    page.click("button[data-unpark='baseline']")
    page.wait_for_function("document.getElementById('parked').textContent === ''", timeout=30000)
    page.wait_for_function("document.querySelectorAll('button[data-unpark]').length === 0", timeout=30000)
    assert _parked(host) == {}
    assert errors == []


def _park_and_wake(host: Api, name: str) -> tuple[int, Any]:
    """`name` cold, parked by a switch away, then activated again: its first main PID and the last run."""
    _unpark_all(host)
    _switch(host, name)
    pid = _main_pid(host, f"k25-engine@{name}.service")
    _switch(host, "vllm-eagle3")
    assert name in _parked(host)
    return pid, _switch(host, name)


def _journal(host: Api, unit: str) -> list[str]:
    out = inside(host.info, "journalctl", "-u", unit, "-o", "cat", "--no-pager").stdout
    return out.splitlines()


def test_an_sglang_command_without_the_cpu_backup_is_refused(host: Api) -> None:
    shown = host.client.get("/profiles/sgnobackup").json()
    assert shown["valid"] is False
    assert "lacks --enable-weights-cpu-backup" in shown["error"]
    assert "sgl-project/sglang#6367, #19442" in shown["error"]
    r = host.client.post("/profiles/sgnobackup/activate")
    assert r.status_code == 404
    assert "lacks --enable-weights-cpu-backup" in r.json()["detail"]
    checked = _cli(host, "check-profiles")
    assert "sgnobackup" in checked.stdout + checked.stderr
    assert "lacks --enable-weights-cpu-backup" in checked.stdout + checked.stderr


def test_sglang_parks_and_resumes_with_the_same_process_and_answer(host: Api) -> None:
    argv = host.client.get("/profiles/sgpark").json()["argv"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"], argv  # rendered, not a command
    assert argv[-2:] == ["--enable-memory-saver", "--enable-weights-cpu-backup"], argv
    pid, back = _park_and_wake(host, "sgpark")
    assert _main_pid(host, "k25-engine@sgpark.service") == pid
    assert "resume memory occupation" in _journal(host, "k25-engine@sgpark.service")
    assert any(d.startswith("known answer equal to run ") for d in _details(back, "waking")), _details(back)
    assert {"wake", "known_answer"} <= set(back["load_stages"] or {})


def test_vllm_level_2_wakes_through_reload_weights(host: Api) -> None:
    pid, back = _park_and_wake(host, "level2")
    assert _main_pid(host, "k25-engine@level2.service") == pid
    calls = [
        line
        for line in _journal(host, "k25-engine@level2.service")
        if line.startswith(("sleep: level", "wake up the engine with tags", "collective_rpc"))
    ]
    assert calls[-4:] == [
        "sleep: level 2",
        "wake up the engine with tags: ['weights']",
        "collective_rpc: reload_weights",
        "wake up the engine with tags: ['kv_cache']",
    ], calls
    assert {"wake", "reload", "known_answer"} <= set(back["load_stages"] or {}), back["load_stages"]
    assert any(d.startswith("known answer equal to run ") for d in _details(back, "waking")), _details(back)


def test_an_engine_without_reload_weights_is_started_cold(host: Api) -> None:
    pid, back = _park_and_wake(host, "norpc")
    why = "wake failed: POST /collective_rpc answered HTTP 404: the engine does not serve reload_weights"
    assert any(d.startswith(f"stopping parked norpc: {why}") for d in _details(back, "stop")), _details(back)
    assert _main_pid(host, "k25-engine@norpc.service") != pid
    assert back["outcome"] == "active"


def test_a_wake_that_answers_garbage_is_caught_and_nothing_serves_it(host: Api) -> None:
    """The wake restores garbage (/health 200, fluent nonsense): the known answer differs twice, the run
    records both answers, the engine is stopped and started cold, and a client that keeps asking the
    engine's port gets no garbage once k25-ctl says active."""
    _unpark_all(host)
    _switch(host, "corrupt")
    pid = _main_pid(host, "k25-engine@corrupt.service")
    port = host.client.get("/profiles/corrupt").json()["port"]
    _switch(host, "vllm-eagle3")
    assert "corrupt" in _parked(host)
    seen: list[tuple[float, str]] = []
    stop = threading.Event()

    def ask() -> None:
        body = {"model": "kimi-k2.5", "prompt": "The capital of France is", "max_tokens": 4}
        with httpx.Client(timeout=5) as c:
            while not stop.is_set():
                began = time.time()
                try:
                    r = c.post(f"http://127.0.0.1:{port}/v1/completions", json=body)
                    seen.append((began, r.json()["choices"][0]["text"] if r.status_code == 200 else ""))
                except (httpx.HTTPError, ValueError, KeyError):
                    seen.append((began, ""))  # not served (asleep, stopped, loading): no answer at all

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        back = _switch(host, "corrupt")
        active_at = datetime.fromisoformat(back["ended_at"]).timestamp()
        host.wait_until(
            lambda: sum(1 for t, _ in seen if t > active_at) >= 20,
            within_s=30,
            what="20 answers after active",
        )
    finally:
        stop.set()
        asker.join()
    why = next(d for d in _details(back, "stop") if d.startswith("stopping parked corrupt: wake failed: "))
    assert "the completion answer differs from token 0: after the wake '!! !!" in why, why
    assert "vs before the park '" in why
    assert "k25-engine@corrupt.service" in _details(back, "start")
    assert _main_pid(host, "k25-engine@corrupt.service") != pid
    assert (back["outcome"], host.status()["state"]) == ("active", "active")
    after = [text for t, text in seen if t > active_at]
    assert after, seen
    assert all(text and "!!" not in text for text in after), after
    print(f"corrupt wake: {len(seen)} answers asked, {sum('!!' in t for _, t in seen)} garbage before active")
