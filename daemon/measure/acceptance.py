"""Acceptance per prompt category, with a confidence interval (which kinds of prompt a drafter serves): a pass
after the level's timed requests, on the same request bodies, one category at a time.

- Where the engine reports verify steps per request (SGLang's native /generate: `meta_info.spec_verify_ct`),
  each request is a unit: its output tokens and its verify steps.
- Where it does not (vLLM: counters only), each category's requests run in windows of their own (up to
  `WINDOWS`, at least `MIN_PER_WINDOW` requests each), the engine's counters read before and after each:
  a window is a unit, its generated tokens and its steps (tokens over the window's acceptance length).

The category's acceptance length is the ratio estimator sum(tokens) / sum(steps); its 95% interval the
ratio estimator's standard error (Cochran, Sampling Techniques, 3rd ed., 6.3) with Student's t on the
units' degrees of freedom. Every figure says how it was obtained."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import httpx

from daemon.core.jsontypes import RequestBody, StoredJson
from daemon.core.profiles import Profile
from daemon.datasets.shapes import prompt_text
from daemon.engines.base import Engine
from daemon.engines.engine_types import MetricsSnapshot
from daemon.measure.client import Request, run_level
from daemon.measure.prompts import PromptSet

WINDOWS = 4
CONFIDENCE = 0.95
MIN_PER_WINDOW = 2
Counters = Callable[[], Awaitable[MetricsSnapshot]]


@dataclass(frozen=True)
class Unit:
    tokens: float  # output tokens
    steps: float  # verify (decode) steps that produced them


def interval(units: Sequence[Unit]) -> tuple[float | None, float | None, float | None]:
    """(acceptance length, low, high): the ratio estimator and its 95% interval (None: too few units)."""
    from scipy import stats

    steps = sum(u.steps for u in units)
    if not units or steps <= 0:
        return None, None, None
    r = sum(u.tokens for u in units) / steps
    n = len(units)
    if n < 2:
        return r, None, None
    mean_steps = steps / n
    var = sum((u.tokens - r * u.steps) ** 2 for u in units) / (n - 1) / (n * mean_steps**2)
    half = float(stats.t.ppf((1 + CONFIDENCE) / 2, n - 1)) * math.sqrt(var)
    return r, r - half, r + half


def _windows(indices: list[int]) -> list[list[int]]:
    count = max(1, min(WINDOWS, len(indices) // MIN_PER_WINDOW))
    return [indices[i::count] for i in range(count)]


class AcceptancePass:
    """One level's acceptance per category, measured after its timed requests."""

    def __init__(
        self,
        engine: Engine,
        profile: Profile,
        client: httpx.AsyncClient,
        counters: Counters,
        *,
        concurrency: int | None,
        timeout_s: float,
    ) -> None:
        self.engine = engine
        self.profile = profile
        self.client = client
        self.counters = counters
        self.concurrency = concurrency
        self.timeout_s = timeout_s

    async def run(
        self, prompts: PromptSet, bodies: list[tuple[str, RequestBody]], max_tokens: int, ignore_eos: bool
    ) -> StoredJson:
        by_cat: dict[str, list[int]] = {}
        for i, cat in enumerate(prompts.categories):
            by_cat.setdefault(cat, []).append(i)
        out: StoredJson = {}
        for cat, indices in sorted(by_cat.items()):
            if self.engine.verify_source is not None:
                # The timed requests' own text (salted as they were), each at its own length.
                texts = [
                    (prompt_text(bodies[i][1]), prompts.prompts[i].output_tokens or max_tokens)
                    for i in indices
                ]
                units, how = await self._per_request(texts, ignore_eos), self.engine.verify_source
            else:
                windows = _windows(indices)
                units = [u for w in windows if (u := await self._window([bodies[i] for i in w])) is not None]
                how = f"{len(windows)} window(s) of this category alone: the engine's counters differenced"
            length, low, high = interval(units)
            out[cat] = {
                "acceptance_length": length,
                "low": low,
                "high": high,
                "units": len(units),
                "method": how,
            }
        return out

    async def _window(self, bodies: list[tuple[str, RequestBody]]) -> Unit | None:
        base = self.profile.base_url
        before = await self.counters()
        await run_level(
            self.client,
            [Request(base + path, body) for path, body in bodies],
            concurrency=self.concurrency or len(bodies),
            rate=None,
            timeout_s=self.timeout_s,
        )
        d = self.engine.usage_delta(self.profile, before, await self.counters())
        if not d.acceptance_length or not d.generation_tokens:
            return None
        return Unit(d.generation_tokens, d.generation_tokens / d.acceptance_length)

    async def _per_request(self, texts: list[tuple[str, int]], ignore_eos: bool) -> list[Unit]:
        gate = asyncio.Semaphore(self.concurrency or len(texts))

        async def one(text: str, tokens: int) -> Unit | None:
            found = self.engine.verify_request(
                self.profile, text, max_tokens=tokens, temperature=0.0, ignore_eos=ignore_eos
            )
            if found is None:
                return None
            path, body = found
            async with gate:
                try:
                    r = await self.client.post(
                        self.profile.base_url + path, json=body, timeout=self.timeout_s
                    )
                    answer = r.json() if r.status_code == 200 else None
                    counts = self.engine.verify_counts(answer) if isinstance(answer, dict) else None
                except (httpx.HTTPError, ValueError):
                    return None
            return None if counts is None else Unit(*counts)

        got = await asyncio.gather(*(one(t, n) for t, n in texts))
        return [u for u in got if u is not None]
