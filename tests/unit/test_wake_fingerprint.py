"""Issue 52: a wake proven by the fingerprint (the top-5 logprobs of every known-answer token), against
fake engines run as processes: each fault a wake can leave behind is caught in 20 of 20 tries, and 200
clean wakes of an engine with float noise within the tolerance raise no alarm. The check is the daemon's
own: its requests (Prober.answer), its tolerance from two asks of the cold engine, its prefix-cache reset
after the wake and its judge."""

from __future__ import annotations

import asyncio
import contextlib
import math

import httpx
import pytest

from daemon.core.profiles import ParkMode, Profile
from daemon.engines import engine_for
from daemon.engines.answers import PRIMING, REQUESTS, Answer, requests_for
from daemon.engines.client import ProbeFailed, Prober
from daemon.proving import fingerprint
from daemon.proving.agreement import judge
from tests.fake_engines import Engine, Start

NOISE = "0.004"  # nats, uniform +-: two asks differ by at most 0.008, under the 0.01 floor
RATE = "4000"  # tokens/s: the check's 32 tokens in ~10 ms


LORA = ("--enable-lora", "--lora-modules", "sql=/srv/lora/sql")  # one adapter: its own known answer


def _profile(engine: Engine) -> Profile:
    port = int(engine.url.rsplit(":", 1)[1])
    return Profile(name="fp", engine="vllm", model="/m", port=port, park=ParkMode.SLEEP, served_model_name="kimi-k2.5",
                   lora_adapters={"sql": "/srv/lora/sql"})  # fmt: skip


async def _ask(prober: Prober, p: Profile) -> tuple[Answer, ...]:
    return tuple([await prober.answer(p, engine_for(p), req) for req in requests_for(p)])


async def _cycle(c: httpx.AsyncClient, prober: Prober, p: Profile) -> None:
    """Primed, parked and woken as the daemon does it; the prefix cache reset where the engine has it."""
    calls = engine_for(p).park_calls(p)
    assert calls is not None
    with contextlib.suppress(ProbeFailed):  # as KnownAnswers.prime: an engine that fails is the check's
        await prober.answer(p, engine_for(p), PRIMING)
    assert (await c.post(calls.sleep)).status_code == 200
    for step in calls.wake:
        assert (await c.post(step.path)).status_code == 200
    await c.post(calls.reset_prefix_cache or "/")  # 404 where the engine has no reset (the fault)


async def _wakes(engine: Engine, tries: int) -> list[str | None]:
    """Record (two asks), then `tries` park-and-wake cycles each judged: what each judge said."""
    p, prober = _profile(engine), Prober()
    try:
        recorded = await _ask(prober, p)
        tolerance = fingerprint.tolerance(recorded, await _ask(prober, p))
        assert fingerprint.FLOOR <= tolerance < 0.02, tolerance
        said = []
        async with httpx.AsyncClient(base_url=engine.url, timeout=10) as c:
            for _ in range(tries):
                await _cycle(c, prober, p)
                try:
                    said.append(judge(await _ask(prober, p), recorded, tolerance))
                except ProbeFailed as e:
                    said.append(str(e))
        return said
    finally:
        await prober.aclose()


@pytest.mark.parametrize(
    ("fault", "expect"),
    [
        ("wake-drifts", "logprobs moved at token 0 of request 0: alternative"),
        ("wake-corrupts-shard", "logprobs moved at token 3 of request 0: alternative"),
        ("stale-prefix-cache", "the completion answer differs from token 0"),
        ("wake-then-fails", "the known-answer completion request answered HTTP 500"),
        ("wake-loses-lora", "the adapter sql's completion answer differs from token 0"),
    ],
)
def test_each_fault_a_wake_leaves_is_caught_20_of_20(start: Start, fault: str, expect: str) -> None:
    engine = start("vllm", "--fault", fault, "--logprob-noise", NOISE, "--rate", RATE, *LORA)
    said = asyncio.run(_wakes(engine, 20))
    caught = [s for s in said if s]
    assert len(caught) == 20, said
    assert all(s.startswith(expect) for s in caught), caught[:3]


def test_200_clean_wakes_with_float_noise_raise_no_alarm(start: Start) -> None:
    engine = start("vllm", "--logprob-noise", NOISE, "--rate", RATE, *LORA)
    said = asyncio.run(_wakes(engine, 200))
    assert [s for s in said if s] == []


def test_corruption_after_cycles_is_caught_at_the_cycle_it_starts(start: Start) -> None:
    """torch_memory_saver#71: garbage after about four cycles. Clean wakes 1-4, caught from the 5th."""
    engine = start(
        "vllm", "--fault", "drifts-after-cycles", "--fault-after", "5", "--logprob-noise", NOISE, *LORA
    )
    said = asyncio.run(_wakes(engine, 8))
    assert [i + 1 for i, s in enumerate(said) if s] == [5, 6, 7, 8], said


def test_the_judge_reads_position_and_size() -> None:
    """A position's chosen logprob, its alternatives, and an alternative one top list lacks."""

    def answer(*positions: tuple[float, tuple[tuple[str, float], ...]]) -> tuple[Answer, ...]:
        return (Answer(REQUESTS[0].kind, REQUESTS[0].prompt, "x", ("1", "2"), positions),)

    base = answer((-0.1, (("a", -0.1), ("b", -2.0))), (-0.2, (("c", -0.2), ("d", -3.0))))
    same = answer((-0.104, (("a", -0.104), ("b", -2.003))), (-0.2, (("c", -0.2), ("d", -3.0))))
    assert judge(same, base, 0.01) is None
    moved = answer((-0.1, (("a", -0.1), ("b", -2.0))), (-0.2, (("c", -0.2), ("d", -2.5))))
    assert judge(moved, base, 0.01) == (
        "logprobs moved at token 1 of request 0: alternative 'd' by 0.5 nats (tolerance 0.01)"
    )
    swapped = answer((-0.1, (("a", -0.1), ("e", -1.0))), (-0.2, (("c", -0.2), ("d", -3.0))))
    said = judge(swapped, base, 0.01)
    assert said is not None
    assert said.startswith(
        "logprobs moved at token 0 of request 0: alternative 'e' (in one top list only) by 1"
    )
    assert fingerprint.tolerance(base, same) == fingerprint.FLOOR
    assert math.isclose(fingerprint.tolerance(base, moved), 0.5)
