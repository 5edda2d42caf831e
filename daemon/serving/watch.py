"""The serving run: it begins when a switch ends `active` (or an engine started outside k25-ctl answers),
checks the engine's liveness and metrics every interval while it serves, and ends with the next switch, a
stop or a crash (seen by the unit follower, units.py). A hang makes the host `unhealthy` and acts only
with `on_hang`; the minute rows of its metrics are written as they fill."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from functools import partial

from daemon.core.hoststate import HostState
from daemon.core.profiles import LoadedProfile, Policy
from daemon.core.run_types import NewRun, Outcome, Phase, RunKind
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.client import EnginePort
from daemon.engines.engine_types import MetricsSnapshot, Readiness
from daemon.runs.recorder import HostAfter, RunRecorder
from daemon.serving.metrics import MetricsWindow
from daemon.serving.policies import Incident, Incidents
from daemon.serving.serving_run import AnswerRecorder, Sample, Serving, ServingNow
from daemon.store.models import ServingMetric
from daemon.store.serving import ServingStore

log = logging.getLogger("k25.watch")


class ServingWatch:
    def __init__(
        self,
        *,
        settings: Settings,
        engines: EnginePort,
        recorder: RunRecorder,
        store: ServingStore,
        incidents: Incidents,
        answers: AnswerRecorder,
    ) -> None:
        self.settings = settings
        self.engines = engines
        self.recorder = recorder
        self.hub = recorder.hub
        self.store = store
        self.answers = answers
        self.incidents = incidents
        self.serving: Serving | None = None
        self.changes = 0  # counts what /status shows of the watch (scrapes, serving runs)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def close(self) -> None:
        task = self.serving.task if self.serving else None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # -- serving runs (the switcher and reconciliation call these) ------------------------------------

    async def begin(
        self,
        lp: LoadedProfile,
        *,
        parent: int | None,
        adopt_run: int | None = None,
        managed: bool = True,
        loading: bool = False,
    ) -> int:
        """A profile is active: its serving run starts (or, after a daemon restart, carries on). `loading`:
        a unit started outside k25-ctl whose engine may still load; the host is active once it answers."""
        p = lp.profile
        if adopt_run is None:
            new = NewRun(RunKind.SERVING, p.name, None, parent, None, lp.sha256, p.unit)
            run_id = await self.recorder.create(new, happened=True)
            await self.recorder.event(run_id, Phase.SERVING, f"{p.unit} serving")
        else:
            run_id = adopt_run
            await self.recorder.event(run_id, Phase.SERVING, "followed again after a daemon restart")
        self.serving = Serving(run_id, lp, managed=managed)
        if not loading:
            self.serving.settled.set()
        self.serving.window = MetricsWindow(run_id, p, engine_for(p), self.settings.metrics_row_s)
        if self.settings.watch_enabled:
            self.serving.task = asyncio.create_task(self._liveness(self.serving))
        self.hub.serving(run_id)
        self.changes += 1
        return run_id

    async def end(self, outcome: Outcome, detail: str, *, host: HostAfter | None = None) -> int | None:
        """The serving run ends (a switch, a crash, an operator's stop); its last partial row is kept."""
        serving, self.serving = self.serving, None
        if serving is None:
            return None
        serving.settled.set()
        if serving.task is not None:
            serving.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving.task
        if serving.window is not None and outcome is Outcome.STOPPED:
            await self._final_scrape(serving)  # the engine still serves: count up to this moment
        if serving.window is not None and (row := serving.window.row()) is not None:
            await self.recorder.write(f"run {serving.run_id} metrics row", partial(self.store.add_row, row))
        served = time.monotonic() - serving.started
        await self.recorder.write(
            f"run {serving.run_id} served", partial(self.store.set_served, serving.run_id, served)
        )
        self.hub.serving(None)
        crashed = outcome is Outcome.CRASHED
        await self.recorder.finish(
            serving.run_id, outcome, error=detail if crashed else None, detail=detail, host=host
        )
        return serving.run_id

    def now(self) -> ServingNow | None:
        """The serving engine's current figures (the newest scrape, the newest live sample)."""
        s = self.serving
        if s is None:
            return None
        sample = s.live[-1] if s.live else None
        snap = s.last or MetricsSnapshot()
        return ServingNow(
            run_id=s.run_id,
            profile=s.lp.profile.name,
            served_s=time.monotonic() - s.started,
            tokens_per_s=sample.tokens_per_s if sample else None,
            acceptance_length=sample.acceptance_length if sample else None,
            running=snap.running,
            waiting=snap.waiting,
            kv_usage=snap.kv_usage,
            generation_tokens=snap.generation_tokens,
            acceptance_rate=sample.acceptance_rate if sample else None,
        )

    async def settled(self, name: str) -> None:
        """If `name` was started outside k25-ctl and still loads, until it answers health or ends (bounded by
        its load_timeout_s): an activate of it then finds it active instead of starting it again."""
        s = self.serving
        if s is not None and s.loading and s.lp.profile.name == name:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.settled.wait(), s.lp.profile.load_timeout_s)

    def open(self) -> Serving | None:
        """The serving run now, if one is open (the unit follower reads it when a unit changes)."""
        return self.serving

    def current(self) -> LoadedProfile | None:
        """The profile whose engine serves now (its serving run is open)."""
        return self.serving.lp if self.serving is not None else None

    def series(self, run_id: int) -> list[ServingMetric]:
        """A serving run's metric rows (blocking: a thread); LookupError for no such run."""
        return self.store.series(run_id)

    def live(self, run_id: int) -> list[Sample]:
        s = self.serving
        return list(s.live) if s is not None and s.run_id == run_id else []

    # -- liveness and metrics --------------------------------------------------------------------------

    async def _liveness(self, serving: Serving) -> None:
        s = self.settings
        p, engine = serving.lp.profile, engine_for(serving.lp.profile)
        fails, last_gen, moved = 0, None, time.monotonic()
        # The first scrape at once (the serving run's counters start where it starts), then one a period.
        while True:
            code, bodies = await asyncio.gather(
                self.engines.health(p, engine, timeout_s=s.health_timeout_s),
                self.engines.scrape(p, engine, timeout_s=s.health_timeout_s),
            )
            now = time.monotonic()
            fails = 0 if engine.readiness(code) is Readiness.HEALTHY else fails + 1
            if serving.loading and (fails == 0 or now - serving.started > p.load_timeout_s):
                await self._loaded(serving, fails == 0)
            if serving.loading:
                fails = 0  # a loading engine does not answer yet: that is no failure
            evidence = (
                f"health failed {fails} times in a row (last answer: {code or 'none'})"
                if fails >= s.health_failures
                else None
            )
            snap = engine.snapshot(p, bodies) if bodies else None
            if snap is not None:
                await self._record(serving, snap, now)
                gen, running = snap.generation_tokens, snap.running or 0
                if gen != last_gen or running == 0:
                    last_gen, moved = gen, now
                elif now - moved >= s.stall_s:
                    evidence = (
                        f"{running:.0f} request(s) running but no token generated for {now - moved:.0f}s "
                        f"(generation counter at {gen:.0f})"
                    )
            await self._health(serving, evidence)
            await asyncio.sleep(s.watch_interval_s)  # the watch's period: liveness has no event to wait for

    async def _loaded(self, serving: Serving, healthy: bool) -> None:
        """An engine started outside k25-ctl answers health (or its load_timeout_s passed): the host is
        active, and the liveness rules apply from here on."""
        p = serving.lp.profile
        why = (
            "answers health"
            if healthy
            else f"has not answered health within load_timeout_s {p.load_timeout_s:g}s"
        )
        log.info("run %d: %s (started outside k25-ctl) %s: active", serving.run_id, p.name, why)
        if healthy:
            await self.answers.record_adopted(serving.run_id, serving.lp)
        await self.recorder.event(serving.run_id, Phase.SERVING, f"{why}: active")
        self.recorder.settle(HostAfter(HostState.ACTIVE, p.name))
        serving.settled.set()

    async def _final_scrape(self, serving: Serving) -> None:
        p = serving.lp.profile
        engine = engine_for(p)
        with contextlib.suppress(Exception):  # the engine may be going away: then the last row stands
            bodies = await self.engines.scrape(p, engine, timeout_s=self.settings.health_timeout_s)
            if bodies:
                await self._record(serving, engine.snapshot(p, bodies), time.monotonic())

    async def _record(self, serving: Serving, snap: MetricsSnapshot, now: float) -> None:
        window = serving.window
        assert window is not None  # noqa: S101 - set with the serving run
        before = serving.last
        serving.last = snap
        self.changes += 1
        row = window.add(snap, now, datetime.now(UTC))
        if row is not None:
            await self.recorder.write(f"run {serving.run_id} metrics row", partial(self.store.add_row, row))
        if before is not None and (seconds := self.settings.watch_interval_s) > 0:
            usage = window.engine.usage_delta(window.profile, before, snap)
            tps = max(0.0, usage.generation_tokens) / seconds
            serving.live.append(
                Sample(time.time(), tps, usage.acceptance_length, snap.running, usage.normalized_rate)
            )

    async def _health(self, serving: Serving, evidence: str | None) -> None:
        state = self.hub.status.state
        if evidence and state is HostState.ACTIVE:
            log.warning("run %d: %s unhealthy: %s", serving.run_id, serving.lp.profile.name, evidence)
            await self.recorder.event(serving.run_id, Phase.UNHEALTHY, evidence)
            self.hub.health(HostState.UNHEALTHY, evidence)
            on_hang = serving.lp.profile.on_hang
            if on_hang is not Policy.NONE and serving.managed and not serving.hang_acted:
                serving.hang_acted = True
                self.incidents.report(Incident(on_hang, serving.lp, serving.run_id, "on_hang"))
        elif not evidence and state is HostState.UNHEALTHY:
            await self.recorder.event(serving.run_id, Phase.SERVING, "healthy again")
            self.hub.health(HostState.ACTIVE, None)
