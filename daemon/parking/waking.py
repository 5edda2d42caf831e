"""A parked engine's wake and its proof: the engine's wake calls in order (each timed in its stage), that it
no longer says it sleeps, a probe generation, a speculative profile's drafter accepting tokens again, and the
known answer recorded after its cold start. Any failure is NotParked with what failed: the caller stops the
engine and starts it cold."""

from __future__ import annotations

import asyncio
import time

from daemon.core.profiles import LoadedProfile
from daemon.engines import engine_for
from daemon.engines.client import EnginePort, ProbeFailed, ProbeProgress
from daemon.engines.engine_types import ParkCalls
from daemon.engines.probing import probe_generation
from daemon.proving.known_answer import KnownAnswers
from daemon.proving.sleep import NotParked, says_sleeping
from daemon.runs.events import RunEvents


async def woken(
    prober: EnginePort,
    answers: KnownAnswers,
    run_id: int,
    lp: LoadedProfile,
    calls: ParkCalls,
    events: RunEvents,
) -> float:
    """The wake's seconds (its calls, up to the engine saying it is awake), once it is proven to serve."""
    p, engine = lp.profile, engine_for(lp.profile)
    before = engine.snapshot(p, await prober.scrape(p, engine)) if p.speculative else None
    began, took = time.monotonic(), dict[str, float]()
    for step in calls.wake:
        t0 = time.monotonic()
        status = await prober.call(p, step.path, body=step.body, timeout_s=p.load_timeout_s)
        if status != 200:  # a wake can run out of GPU memory (vllm-project/vllm#13941, #34600)
            said = f"HTTP {status}" if status else "nothing"
            raise NotParked(f"POST {step.path} answered {said}" + (f": {step.note}" if step.note else ""))
        took[step.stage] = took.get(step.stage, 0.0) + time.monotonic() - t0
    if why := await says_sleeping(prober, p, calls, False):
        raise NotParked(f"{why} after the wake")
    seconds = time.monotonic() - began
    took["wake"] = seconds - sum(v for k, v in took.items() if k != "wake")
    for stage, secs in took.items():
        await events.stage(stage, secs)
    progress = ProbeProgress()
    try:
        await asyncio.wait_for(probe_generation(p, engine, prober, progress, events), p.probe_timeout_s)
    except TimeoutError as e:
        raise NotParked(f"not ready within probe_timeout_s after the wake: {progress.what_hung()}") from e
    except ProbeFailed as e:
        raise NotParked(str(e)) from e
    if before is not None:
        after = engine.snapshot(p, await prober.scrape(p, engine))
        length = engine.usage_delta(p, before, after).acceptance_length
        if length is None or length <= 1.0:  # the drafter's weights not restored (vllm-project/vllm#52479)
            raise NotParked(f"the probe after the wake accepted no draft token (acceptance length {length})")
    if why := await answers.check(run_id, lp, events):  # liveness is not correctness
        raise NotParked(why)
    return seconds
