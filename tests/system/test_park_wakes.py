"""Wakes that come back wrong, in a parking sandbox of its own (split from test_park.py so the two run on
two workers): garbage after a wake, the subtle faults only the fingerprint shows, and drift caught at the
cycle it starts. Each ends stopped and started cold, with the reason on the run and in the journal."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime

import httpx
import pytest

from tests.parking_host import (
    CYCLES,
    details,
    main_pid,
    park_and_wake,
    park_host,
    parked_profiles,
    switch,
    unpark_all,
)
from tests.sandboxing import Api, inside


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with park_host(tmp_path_factory) as api:
        yield api


def test_a_wake_that_answers_garbage_is_caught_and_nothing_serves_it(host: Api) -> None:
    """The wake restores garbage (/health 200, fluent nonsense): the known answer differs twice, the run
    records both answers, the engine is stopped and started cold, and a client that keeps asking the
    engine's port gets no garbage once k25-ctl says active."""
    unpark_all(host)
    switch(host, "corrupt")
    pid = main_pid(host, "k25-engine@corrupt.service")
    port = host.client.get("/profiles/corrupt").json()["port"]
    switch(host, "vllm-eagle3")
    assert "corrupt" in parked_profiles(host)
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
        back = switch(host, "corrupt")
        active_at = datetime.fromisoformat(back["ended_at"]).timestamp()
        host.wait_until(
            lambda: sum(1 for t, _ in seen if t > active_at) >= 20,
            within_s=30,
            what="20 answers after active",
        )
    finally:
        stop.set()
        asker.join()
    why = next(d for d in details(back, "stop") if d.startswith("stopping parked corrupt: wake failed: "))
    assert "the completion answer differs from token 0: after the wake '!! !!" in why, why
    assert "vs before the park '" in why
    assert "k25-engine@corrupt.service" in details(back, "start")
    assert main_pid(host, "k25-engine@corrupt.service") != pid
    assert (back["outcome"], host.status()["state"]) == ("active", "active")
    after = [text for t, text in seen if t > active_at]
    assert after, seen
    assert all(text and "!!" not in text for text in after), after
    print(f"corrupt wake: {len(seen)} answers asked, {sum('!!' in t for _, t in seen)} garbage before active")


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ("wake-drifts", "logprobs moved at token 0 of request 0"),
        ("wake-corrupts-shard", "logprobs moved at token 3 of request 0"),
        ("stale-prefix-cache", "the completion answer differs from token 0"),
        ("wake-then-fails", "probe completion answered HTTP 500"),  # the probe's generation, first
        ("wake-loses-lora", "the adapter sql's completion answer differs from token 0"),
    ],
)
def test_a_subtly_wrong_wake_is_stopped_and_started_cold(host: Api, fault: str, why: str) -> None:
    """Issue 52: what only the fingerprint (or a request after the wake) shows. The woken engine is never
    active: the check fails twice (an engine that fails every request already fails the probe's
    generation), the engine is stopped and started cold, the reason on the run and in the journal."""
    name = f"fp-{fault}"
    pid, back = park_and_wake(host, name)
    stopped = f"stopping parked {name}: wake failed: {why}"
    assert any(d.startswith(stopped) for d in details(back, "stop")), "\n".join(details(back))
    assert not any(d.startswith("known answer equal") for d in details(back, "waking")), details(back)
    assert main_pid(host, f"k25-engine@{name}.service") != pid  # a new process: the cold start
    assert back["outcome"] == "active"
    daemon = inside(host.info, "journalctl", "-u", "k25-ctl.service", "-o", "cat", "--no-pager").stdout
    assert f"run {back['id']}: {stopped}" in daemon


def test_twenty_cycles_each_checked_and_the_drift_caught_at_the_cycle_it_starts(host: Api) -> None:
    """Issue 52 (torch_memory_saver#71: garbage after several cycles): one engine parked and woken 20
    times in a row, the known answer checked after each wake; its weights drift from the 20th wake on.
    Wakes 1-19 serve (the same process), the 20th is caught: stopped and started cold."""
    unpark_all(host)
    switch(host, "fp-cycles")
    pid = main_pid(host, "k25-engine@fp-cycles.service")
    seen = []
    for cycle in range(1, CYCLES + 1):
        switch(host, "quick")
        back = switch(host, "fp-cycles")
        stages = back["load_stages"] or {}
        caught = any("wake failed: logprobs moved" in d for d in details(back, "stop"))
        seen.append((cycle, caught, main_pid(host, "k25-engine@fp-cycles.service") == pid))
        print(f"cycle {cycle}: wake {stages.get('wake', 0):.2f}s, check {stages.get('known_answer', 0):.2f}s"
              f"{', caught: started cold' if caught else ''}")  # fmt: skip
    assert [c for c, caught, _ in seen if caught] == [CYCLES], seen
    assert all(same for c, _, same in seen if c < CYCLES), seen  # every clean wake kept the process
    assert not seen[-1][2]  # the caught one was started cold
