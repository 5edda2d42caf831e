"""The drain against real fake engines in a sandbox of its own (drain_timeout_s 3 s): requests in flight
complete before the engine stops; a request that never ends is cut when the drain times out, and the switch
goes on; a cancel while draining stops nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from daemon.engines import vllm
from k25_sandbox import sandbox as sbx
from k25_sandbox.faults import READY_REQUESTS
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.sandboxing import Api, inside
from tests.waiting import eventually_sync


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    extra, models = tmp_path_factory.mktemp("drain-profiles"), tmp_path_factory.mktemp("drain-models")
    make_models(models)
    # The probe and the known answer's requests (asked twice) come first; every later one hangs (never a
    # token), /health stays 200.
    text = fake_engine_profile("endless", flavor="vllm", port=free_port(), models=models, load_seconds=1.0,
                               faults=("hang-after-ready",), fault_after=READY_REQUESTS)  # fmt: skip
    (extra / "endless.toml").write_text(text)
    # The endless request hangs on purpose: a stall (the sandbox's stall_s is 4 s) would mark the host
    # unhealthy while a test still holds it (CI: "unhealthy" after a cancelled drain, 4+ s after the
    # request began). Stalls are the watch tests' subject, not these.
    settings = {"drain_grace_s": "0.3", "drain_timeout_s": "3", "drain_poll_s": "0.1", "stall_s": "600"}
    info = sbx.up(profiles=extra, load_seconds=1.0, settings=settings, binds=(models,))
    try:
        yield Api(info)
    finally:
        sbx.down(info)


def _engine_url(api: Api) -> str:
    ready = api.client.get("/ready").json()
    assert ready["ready"], ready
    return f"http://127.0.0.1:{ready['port']}"


def _running(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(vllm.M_RUNNING + "{"))


def _send(url: str, max_tokens: int, out: list[Any]) -> threading.Thread:
    def post() -> None:
        body = {"model": "kimi-k2.5", "prompt": "hi", "max_tokens": max_tokens}
        try:
            r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
            out.append(len(r.json()["choices"][0]["text"].split()) if r.status_code == 200 else r.status_code)
        except httpx.HTTPError as e:
            out.append(type(e).__name__)

    t = threading.Thread(target=post, daemon=True)
    t.start()
    return t


def test_requests_in_flight_complete_before_the_stop(host: Api) -> None:
    assert host.activate("baseline", force=True)["outcome"] == "active"
    url = _engine_url(host)
    answers: list[Any] = []
    threads = [_send(url, 160, answers) for _ in range(4)]  # ~2 s each at 82.5 tokens/s
    eventually_sync(lambda: _running(url) == 4, what="4 requests running", within_s=10, every_s=0.05)
    run = host.activate("vllm-eagle3")
    for t in threads:
        t.join(timeout=30)
    assert answers == [160, 160, 160, 160]  # every response whole: the engine stopped after them
    assert run["outcome"] == "active", run
    cost = run["switch_cost"]
    assert (cost["drain_cut"], cost["drain_timed_out"]) == (0, False)
    assert cost["drain_finished"] >= 4


def test_a_drain_that_times_out_cuts_the_endless_request_and_switches(host: Api) -> None:
    assert host.activate("endless", force=True)["outcome"] == "active"
    url = _engine_url(host)
    answers: list[Any] = []
    thread = _send(url, 16, answers)
    eventually_sync(lambda: _running(url) == 1, what="the endless request runs", within_s=10, every_s=0.05)
    run = host.activate("baseline")
    thread.join(timeout=30)
    assert run["outcome"] == "active", run
    cost = run["switch_cost"]
    assert (cost["drain_timed_out"], cost["drain_cut"]) == (True, 1)
    assert answers  # the request ended: cut by the stop
    assert answers[0] != 16
    assert "timed out with 1 request(s) left" in "".join(e["detail"] for e in run["events"])


def test_cancel_while_draining_leaves_the_engine_serving(host: Api) -> None:
    assert host.activate("endless", force=True)["outcome"] == "active"
    url = _engine_url(host)
    answers: list[Any] = []
    _send(url, 16, answers)
    eventually_sync(lambda: _running(url) == 1, what="the endless request runs", within_s=10, every_s=0.05)
    run_id = host.activate("baseline", wait=False)["run_id"]
    eventually_sync(lambda: host.status()["phase"] == "draining", what="draining", within_s=10, every_s=0.05)
    assert host.client.post(f"/runs/{run_id}/cancel").status_code == 202
    run = host.wait_run(run_id)
    assert run["outcome"] == "cancelled", run
    status = host.status()
    assert (status["state"], status["active_profile"]) == ("active", "endless")
    unit = inside(host.info, "systemctl", "is-active", "k25-engine@endless.service").stdout.strip()
    assert unit == "active"
    assert host.client.get("/ready").status_code == 200
    host.activate("baseline", force=True)  # the endless request ends with its engine
