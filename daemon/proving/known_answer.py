"""Known answers as a switch uses them: recorded after each cold start that ends active, and asked again
after every wake, where the same process with the same weights, greedy and alone, must give the same
tokens. A wake that answers differently (twice) is not a wake: the caller stops the engine and starts it
cold. Across profiles the answers are information: speculative decoding is lossless under greedy
sampling, so a speculative profile should answer as the default profile of the same model does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from daemon.core.errors import StoreError
from daemon.core.profiles import LoadedProfile, ProfileSet
from daemon.core.run_types import Phase
from daemon.engines import engine_for
from daemon.engines.answers import PRIMING, Answer, requests_for
from daemon.engines.client import EnginePort, ProbeFailed
from daemon.proving import fingerprint
from daemon.proving.agreement import Agreement, agreement, differs, judge, shorten
from daemon.runs.events import RunEvents
from daemon.runs.recorder import RunRecorder
from daemon.store.known_answers import AnswerKey, KnownAnswerRow, KnownAnswerStore, argv_sha256

log = logging.getLogger("k25.answers")
STAGE = "known_answer"


@dataclass(frozen=True)
class KnownAnswerView:
    """A profile's known answer as the reads show it, with its agreement with the default profile."""

    run_id: int
    recorded_at: datetime
    answers: tuple[Answer, ...]
    agreement: Agreement | None  # None: it is the default profile, or that one has no answer yet


class KnownAnswers:
    """The records, kept in memory for the reads (loaded at start, replaced as each is written)."""

    def __init__(
        self,
        *,
        store: KnownAnswerStore,
        recorder: RunRecorder,
        prober: EnginePort,
        default_profile: str,
        profiles: Callable[[], ProfileSet],
        engine_version: Callable[[str], str | None],
    ) -> None:
        self.store = store
        self.recorder = recorder  # an adopted engine's answer goes on its run's events
        self.prober = prober
        self.default_profile = default_profile
        self._profiles = profiles
        self._engine_version = engine_version  # a profile's engine as installed: answers are kept per version
        self._rows: dict[AnswerKey, KnownAnswerRow] = {}

    async def load(self) -> None:
        self._rows = {r.key: r for r in await asyncio.to_thread(self.store.all)}

    def key(self, lp: LoadedProfile) -> AnswerKey:
        p = lp.profile
        version = self._engine_version(p.name) or ""
        return AnswerKey(p.name, lp.sha256, argv_sha256(engine_for(p).argv(p)), version)

    async def _ask(self, lp: LoadedProfile) -> tuple[Answer, ...]:
        """The fixed requests one after the other (a batch of one), within probe_timeout_s together.
        Raises ProbeFailed."""
        p, engine = lp.profile, engine_for(lp.profile)
        try:
            async with asyncio.timeout(p.probe_timeout_s):
                return tuple([await self.prober.answer(p, engine, req) for req in requests_for(p)])
        except TimeoutError:
            raise ProbeFailed(f"no answer within probe_timeout_s={p.probe_timeout_s:g}s") from None

    async def record(self, run_id: int, lp: LoadedProfile, events: RunEvents) -> None:
        """After a cold start, before the host serves: what this engine answers is what its wakes must."""
        if not engine_for(lp.profile).known_answer:
            return
        began = time.monotonic()
        try:  # twice, same process and batch shape: what differs between the two is the engine's noise
            answers, again = await self._ask(lp), await self._ask(lp)
        except ProbeFailed as e:
            log.warning("run %d: no known answer recorded for %s: %s", run_id, lp.profile.name, e)
            await events.phase(Phase.PROBING, f"no known answer recorded ({e}): a park of it will not wake")
            return
        await events.stage(STAGE, time.monotonic() - began)
        tolerance = fingerprint.tolerance(answers, again)
        stored = [a.as_json() | {"tolerance": tolerance} for a in answers]
        try:
            row, before = await asyncio.to_thread(self.store.save, self.key(lp), run_id, stored)
        except StoreError as e:  # a full disk must not fail the switch: a later wake then starts cold
            log.warning("run %d: the known answer of %s is not stored: %s", run_id, lp.profile.name, e)
            await events.phase(Phase.PROBING, f"known answer not stored ({e}): a park of it will not wake")
            return
        self._rows[row.key] = row
        detail = f"known answer recorded: {shorten(answers[0].text)}; logprob tolerance {tolerance:.4g}"
        if why := differs(again, answers, "asked again", "first"):
            detail += f"; the cold engine answered differently when asked again: {why}"
        if before is None:
            detail += await self._against_other_version(run_id, lp, row.key, answers)
        if before is not None and (why := differs(answers, _decode(before), "now", "before")):
            log.warning(
                "run %d: %s answers differently after a cold start of the same file and argv: %s "
                "(run %d recorded the other)",
                *(run_id, lp.profile.name, why, before.run_id),
            )
            detail += f"; not what run {before.run_id} recorded: {why}"
        elif before is not None:  # across processes logprobs may move a little (kernels, batch setup)
            moved = fingerprint.largest(answers, _decode(before))
            detail += f"; the same tokens as run {before.run_id}'s, logprobs within {moved:.4g} of them"
        await events.phase(Phase.PROBING, detail)
        await self._compare_with_default(run_id, lp, answers)

    async def _against_other_version(
        self, run_id: int, lp: LoadedProfile, key: AnswerKey, answers: tuple[Answer, ...]
    ) -> str:
        """The first answer of an engine version: how it differs from the newest other version's (an
        upgrade moves kernels and numerics: information, not corruption)."""
        try:
            other = await asyncio.to_thread(self.store.other_version, key)
        except StoreError:
            return ""
        if other is None:
            return ""
        old = other.key.engine_version or "an unknown version"
        new = key.engine_version or "an unknown version"
        why = differs(answers, _decode(other), new, old)
        moved = fingerprint.largest(answers, _decode(other))
        said = (
            f"{why}; the largest logprob move {moved:.4g}"
            if why
            else f"the same tokens, logprobs within {moved:.4g}"
        )
        log.info(
            "run %d: %s's first known answer under engine %s; against %s's (run %d): %s",
            *(run_id, lp.profile.name, new, old, other.run_id, said),
        )
        return f"; the engine changed ({old} -> {new}): against run {other.run_id}'s answer: {said}"

    async def record_adopted(self, run_id: int, lp: LoadedProfile) -> None:
        """An engine started outside k25-ctl answers health: record its answer as after any cold start."""
        await self.record(run_id, lp, RunEvents(self.recorder, run_id))

    async def _compare_with_default(
        self, run_id: int, lp: LoadedProfile, answers: tuple[Answer, ...]
    ) -> None:
        p = lp.profile
        if p.name == self.default_profile:
            return
        other = self._current().get(self.default_profile)
        if other is None:
            return
        agreed = agreement(self.default_profile, answers, _decode(other))
        if agreed is not None and agreed.from_first_token:
            log.warning(
                "run %d: %s answers differently from %s from token 0: wrong target model or broken drafter? "
                "(%s)",
                *(run_id, p.name, self.default_profile, agreed.describe()),
            )

    async def check(self, run_id: int, lp: LoadedProfile, events: RunEvents) -> str | None:
        """After a wake: None when the engine gives the recorded answer (a second try where the first
        differs), else what differed. No record: the wake cannot be proven, which is a failure too."""
        try:
            row = await asyncio.to_thread(self.store.get, self.key(lp))
        except StoreError as e:
            return f"the known answer cannot be read ({e}): the wake cannot be proven"
        if row is None:
            return "no known answer was recorded for this profile's file and argv: the wake cannot be proven"
        recorded, began, why = _decode(row), time.monotonic(), ""
        tolerance = _tolerance(row)
        await self._reset_prefix_cache(run_id, lp)
        for attempt in (1, 2):
            try:
                now = await self._ask(lp)
            except ProbeFailed as e:
                why = str(e)
                continue
            why = judge(now, recorded, tolerance) or ""
            if not why:
                break
            log.warning("run %d: %s, try %d of 2: %s", run_id, lp.profile.name, attempt, why)
        await events.stage(STAGE, time.monotonic() - began)
        if why:
            return f"{why} (recorded by run {row.run_id})"
        same = f"known answer equal to run {row.run_id}'s, logprobs within {tolerance:.4g}"
        await events.phase(Phase.WAKING, f"{same}: {shorten(now[0].text)}")
        return None

    async def prime(self, lp: LoadedProfile) -> None:
        """Before a park: one known-answer request, so that its prefix is in the engine's cache. A wake
        that kept stale cache entries then answers it from them, and the check sees it."""
        engine = engine_for(lp.profile)
        if engine.known_answer:
            with contextlib.suppress(ProbeFailed):
                await self.prober.answer(lp.profile, engine, PRIMING)

    async def _reset_prefix_cache(self, run_id: int, lp: LoadedProfile) -> None:
        """After a wake, before the check: the engine forgets the KV blocks it indexed before the sleep."""
        calls = engine_for(lp.profile).park_calls(lp.profile)
        if calls is None or calls.reset_prefix_cache is None:
            return
        status = await self.prober.call(lp.profile, calls.reset_prefix_cache, timeout_s=10.0)
        if status != 200:
            log.warning(
                "run %d: %s answered %s to POST %s: its prefix cache may be stale (the check will tell)",
                *(run_id, lp.profile.name, status, calls.reset_prefix_cache),
            )

    def _current(self) -> dict[str, KnownAnswerRow]:
        """Each valid profile's record for its file and argv as they are now."""
        keys = {self.key(lp) for lp in self._profiles().valid.values()}
        return {k.profile: r for k, r in self._rows.items() if k in keys}

    def views(self) -> dict[str, KnownAnswerView]:
        """Each profile's answer for its current file and argv, with its agreement with the default's."""
        rows = self._current()
        default = rows.get(self.default_profile)
        out = {}
        for name, row in rows.items():
            agreed = None
            if default is not None and name != self.default_profile:
                agreed = agreement(self.default_profile, _decode(row), _decode(default))
            out[name] = KnownAnswerView(row.run_id, row.recorded_at, _decode(row), agreed)
        return out

    def agreements(self, other: str) -> dict[str, Agreement]:
        """How each profile's answer agrees with `other`'s (those both have)."""
        rows = self._current()
        theirs = rows.get(other)
        if theirs is None:
            return {}
        found = {n: agreement(other, _decode(r), _decode(theirs)) for n, r in rows.items() if n != other}
        return {n: a for n, a in found.items() if a is not None}


def _tolerance(row: KnownAnswerRow) -> float:
    """The record's logprob tolerance (the floor for a record from before fingerprints)."""
    stored = [a.get("tolerance") for a in row.answers if isinstance(a, dict)]
    return max((float(t) for t in stored if isinstance(t, (int, float))), default=fingerprint.FLOOR)


def _decode(row: KnownAnswerRow) -> tuple[Answer, ...]:
    return tuple(Answer.from_json(a) for a in row.answers)
