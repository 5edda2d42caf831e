"""The serving watch against real systemd in the sandbox: a killed engine, a hung one, units changed with
systemctl, and the metrics of a serving run under steady traffic."""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import ROW_S, Api, inside


@contextmanager
def host_states(sandbox: SandboxInfo) -> Iterator[list[tuple[float, str]]]:
    """(time seen, state) of every host state change, from the /events stream, subscribed before acting."""
    seen: list[tuple[float, str]] = []
    ready, stop = threading.Event(), threading.Event()

    def read() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the stream ends with the sandbox
            with httpx.stream("GET", f"{sandbox.url}/events", timeout=httpx.Timeout(10, read=None)) as r:
                for line in r.iter_lines():
                    ready.set()
                    if line.startswith("data:"):
                        seen.append((time.time(), json.loads(line[5:])["state"]))
                    if stop.is_set():
                        return

    t = threading.Thread(target=read, daemon=True)
    t.start()
    assert ready.wait(10)
    try:
        yield seen
    finally:
        stop.set()


def _first(seen: list[tuple[float, str]], state: str, api: Api) -> float:
    return float(api.wait_until(lambda: next((t for t, s in seen if s == state), None), what=state))


def test_kill_9_of_the_default_profile_fails_then_restarts(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline", force=True)
    serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
    with host_states(sandbox) as seen:
        killed = time.time()
        assert (
            inside(sandbox, "systemctl", "kill", "-s", "KILL", "vllm-kimi-k25-int4.service").returncode == 0
        )
        failed_at = _first(seen, "failed", api)
    print(f"kill -9 -> host state failed in {failed_at - killed:.3f}s")
    run = api.wait_run(serving)
    assert (run["kind"], run["outcome"]) == ("serving", "crashed")
    assert "result signal" in run["error"]
    # on_failure of the default profile: restart, as a run linked to the crashed serving run.
    api.wait_until(lambda: api.status()["state"] == "active" and api.status()["serving_run_id"] != serving,
                   within_s=60, what="restarted")  # fmt: skip
    restart = next(
        r for r in api.client.get("/runs", params={"limit": 10}).json() if r["parent_id"] == serving
    )
    assert (restart["kind"], restart["profile"], restart["outcome"]) == ("switch", "baseline", "active")


def test_a_late_crash_rolls_back_to_the_known_good(api: Api) -> None:
    api.activate("baseline", force=True)
    run = api.activate("late-crash")
    assert run["outcome"] == "active"  # the probe and the known answer (asked twice) came first
    serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
    port = api.client.get("/profiles/late-crash").json()["port"]
    httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "hi", "max_tokens": 4}, timeout=30)
    crashed = api.wait_run(serving)
    assert crashed["outcome"] == "crashed"
    api.wait_until(lambda: api.status()["active_profile"] == "baseline" and api.status()["state"] == "active",
                   within_s=60, what="rolled back")  # fmt: skip
    rb = next(r for r in api.client.get("/runs", params={"limit": 10}).json() if r["parent_id"] == serving)
    assert (rb["kind"], rb["from_profile"], rb["outcome"]) == ("rollback", "late-crash", "active")


def test_a_hang_with_traffic_is_unhealthy_within_stall_s(api: Api, sandbox: SandboxInfo) -> None:
    assert api.activate("late-hang")["outcome"] == "active"
    port = api.client.get("/profiles/late-hang").json()["port"]
    began = time.time()

    def stuck_request() -> None:
        body = {"prompt": "hi", "max_tokens": 8, "stream": True}
        try:
            with httpx.stream("POST", f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=60) as r:
                for _ in r.iter_lines():
                    pass
        except httpx.HTTPError:
            pass  # the engine is stopped under it at the end of the test

    threading.Thread(target=stuck_request, daemon=True).start()
    st = api.wait_until(lambda: (s := api.status())["state"] == "unhealthy" and s, within_s=4 + 2 + 5,
                        what="unhealthy")  # fmt: skip  # stall_s + an interval, and slack
    print(f"hang -> unhealthy in {time.time() - began:.1f}s: {st['reason']}")
    assert "request(s) running but no token generated" in st["reason"]
    assert st["active_profile"] == "late-hang"  # on_hang is opt-in: alert, do not kill
    assert api.activate("baseline")["outcome"] == "active"


def test_systemctl_stop_and_start_are_followed(api: Api, sandbox: SandboxInfo) -> None:
    api.activate("baseline", force=True)
    with host_states(sandbox) as seen:
        t0 = time.time()
        assert inside(sandbox, "systemctl", "stop", "vllm-kimi-k25-int4.service").returncode == 0
        idle = _first(seen, "idle", api) - t0
        t1 = time.time()
        assert inside(sandbox, "systemctl", "start", "vllm-kimi-k25-int4.service").returncode == 0
        active = api.wait_until(
            lambda: next((t for t, s in seen if s == "active" and t > t1), None), what="active"
        )
    print(
        f"systemctl stop -> idle in {idle:.3f}s (after the stop job); start -> active in {active - t1:.3f}s"
    )
    st = api.status()
    assert (st["state"], st["active_profile"]) == ("active", "baseline")
    kinds = [(r["kind"], r["profile"]) for r in api.client.get("/runs", params={"limit": 5}).json()]
    assert ("external", "baseline") in kinds


def test_serving_metrics_under_steady_traffic(api: Api, sandbox: SandboxInfo) -> None:
    """Three rows' time (metrics_row_s, ROW_S in the session sandbox) of one steady stream on the speculative
    vLLM profile (54.6 tok/s, acceptance 0.15): each full row holds the engine's rate and acceptance. The
    rate a row must hold is the one the engine's own counter shows over the row's interval (the test reads
    it four times a second): on a busy machine the stream runs below 54.6 (CI: 51.1), and the row with it."""
    assert api.activate("vllm-eagle3", force=True)["outcome"] == "active"
    serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
    port = api.client.get("/profiles/vllm-eagle3").json()["port"]
    engine = f"http://127.0.0.1:{port}"
    names = (
        "vllm:spec_decode_num_accepted_tokens_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:generation_tokens_total",
    )

    def counters() -> dict[str, float]:
        text = httpx.get(f"{engine}/metrics", timeout=10).text
        return {n: sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(n)) for n in names}

    generated: list[tuple[float, float]] = []  # (time, the engine's generation counter)
    stop = threading.Event()

    def sample() -> None:
        while True:
            began = time.time()
            value = counters()["vllm:generation_tokens_total"]
            generated.append(((began + time.time()) / 2, value))
            if stop.wait(0.25):
                return

    before, start = counters(), time.time()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        with httpx.Client(timeout=60) as c:
            while time.time() - start < 3 * ROW_S:
                with c.stream("POST", f"{engine}/v1/completions",
                              json={"prompt": "count", "max_tokens": 100, "stream": True}) as r:  # fmt: skip
                    for _ in r.iter_lines():
                        pass
    finally:
        stop.set()
        sampler.join(timeout=30)
    after = counters()
    accepted, drafted = (after[k] - before[k] for k in names[:2])
    rate = accepted / drafted
    series = api.client.get(f"/runs/{serving}/metrics").json()
    first, last = generated[0][0], generated[-1][0]
    full: list[Any] = [
        r for r in series["rows"]
        if _ts(r["at"]) >= first and _ts(r["at"]) + r["seconds"] <= last and r["seconds"] >= ROW_S - 1
    ]  # fmt: skip
    print(
        "rows:", [(r["at"][11:19], round(r["tokens_per_s"], 2), r["acceptance_rate"]) for r in series["rows"]]
    )
    print(f"fake engine over the run: acceptance {rate:.4f}")
    assert full, series["rows"]
    for r in full:
        at = _ts(r["at"])
        engine_rate = (_at(generated, at + r["seconds"]) - _at(generated, at)) / r["seconds"]
        print(
            f"row at {r['at'][11:19]}: {r['tokens_per_s']:.2f} tok/s, the engine's counter {engine_rate:.2f}"
        )
        assert engine_rate > 0.5 * 54.6, (r, engine_rate)  # the stream ran through the row
        assert abs(r["tokens_per_s"] - engine_rate) <= 0.05 * engine_rate, (r, engine_rate)
        assert abs(r["acceptance_rate"] - rate) < 0.01, (r, rate)
        assert r["acceptance_length"] is not None
        assert len(r["per_position"]) == 3
    run = api.run(serving)
    assert run["generation_tokens"] >= sum(r["generation_tokens"] for r in full)


def _at(samples: list[tuple[float, float]], t: float) -> float:
    """A counter's value at time t, linear between the two samples around it."""
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    raise AssertionError(f"{t} is outside the samples ({samples[0][0]}..{samples[-1][0]})")


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()
