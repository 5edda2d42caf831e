"""The simulation's steps: what an operator and the world do to a host, each drawn with a probability and
its timings from the seed (`plan`), and done against the real daemon (`perform`). A step's arguments are
data, so that a trace is replayed and shrunk without the generator: the same list of steps is the same
walk. A step waits for what it started to end, and reads each end the way the CLI and the Ansible
collection do (the run's record, then the host): what it saw that no reader may see is a violation."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from perf.sim.world import FAULTY, GOOD, PARKS, World

BENCH = {"concurrency": [1], "num_prompts": 2, "max_tokens": 8, "warmups": 0, "request_timeout_s": 5}
CAPACITY = BENCH | {
    "num_prompts": 6,
    "slo": "tpot_mean_ms=50",
    "capacity": {"start_rate": 20.0, "resolution": 0.5, "extend": 1, "max_steps": 2},
}
RUN_WITHIN_S = 240.0  # an experiment of two rounds on a loaded machine; a run that takes longer is stuck
WEIGHTS: dict[str, int] = {
    "activate": 24,
    "activate_faulty": 6,
    "unpark": 4,
    "warm": 3,
    "bench": 6,
    "experiment": 2,
    "capacity": 2,
    "cancel": 8,
    "daemon_kill": 6,
    "engine_crash": 5,
    "engine_hang": 2,
    "disk_full": 2,
    "concurrent": 6,
    "teardown": 4,
}


@dataclass(frozen=True)
class Step:
    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        return f"{self.kind}({', '.join(f'{k}={v!r}' for k, v in self.args.items())})"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": self.args}


@dataclass
class Done:
    """What a step did, and what it saw that must not be."""

    said: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def _draw(rng: random.Random) -> Step:
    kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    good, any_profile = rng.choice(GOOD), rng.choice(GOOD + FAULTY)
    after_s = round(rng.uniform(0.0, 2.5), 2)
    match kind:
        case "activate":
            return Step(kind, {"profile": good, "force": rng.random() < 0.2})
        case "activate_faulty":
            return Step("activate", {"profile": rng.choice(FAULTY), "force": rng.random() < 0.5})
        case "unpark":
            return Step(kind, {})
        case "warm":
            return Step(kind, {"profile": good})
        case "experiment":
            return Step(kind, {"profiles": rng.sample(GOOD, 2)})
        case "cancel":
            return Step(kind, {"job": rng.choice(("activate", "bench", "experiment")), "profile": good,
                               "after_s": after_s})  # fmt: skip
        case "daemon_kill":
            job = rng.choice((None, "activate", "bench", "experiment", "unpark"))
            return Step(kind, {"job": job, "profile": any_profile, "after_s": after_s})
        case "engine_hang":  # a stall that passes, or (None) one that lasts until something stops it
            return Step(kind, {"for_s": None if rng.random() < 0.3 else round(rng.uniform(0.5, 4.0), 2)})
        case "engine_crash":
            return Step(kind, {})
        case "disk_full":  # full before the switch (refused), or while it loads (held in memory)
            return Step(kind, {"profile": good, "after_s": None if rng.random() < 0.5 else after_s})
        case "concurrent":
            other = rng.choice(("activate", "bench", "teardown", "unpark", "warm"))
            return Step(kind, {"profile": good, "other": other, "other_profile": rng.choice(GOOD)})
        case _:  # bench, capacity, teardown
            return Step(kind, {})


def plan(seed: int, steps: int) -> list[Step]:
    """The walk a seed stands for."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible walk, not a secret
    return [_draw(rng) for _ in range(steps)]


# -- doing them ---------------------------------------------------------------------------------------------


def _status(world: World) -> dict[str, Any]:
    got: dict[str, Any] = world.client.get("/status").json()
    return got


def _active(world: World) -> str | None:
    st = _status(world)
    return st["active_profile"] if st["state"] in ("active", "unhealthy") else None


def _start(world: World, method: str, path: str, done: Done, **kw: Any) -> int | None:
    """A request that starts a run: its id, or None (refused: 409, 404, 422; said in `done`)."""
    r = world.client.request(method, path, **kw)
    if r.status_code == 503 and "cannot be written" in r.text:
        # the designed refusal of a new switch or benchmark while the database cannot take its run
        # (runs/recorder.py create): nothing started; the invariants check that nothing changed
        done.said.append(f"{method} {path} -> 503 (the runs database cannot be written: refused)")
        return None
    if r.status_code >= 500:
        done.violations.append(f"[http] {method} {path}: {r.status_code} {r.text[:300]}")
        return None
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    run_id = body.get("run_id") if isinstance(body, dict) else None
    if run_id is None and isinstance(body, dict) and r.status_code == 200:
        run_id = body.get("id")
    done.said.append(f"{method} {path} -> {r.status_code}" + (f" run {run_id}" if run_id else ""))
    return run_id if isinstance(run_id, int) else None


def wait_run(
    world: World, run_id: int, done: Done, *, within_s: float = RUN_WITHIN_S
) -> dict[str, Any] | None:
    """Until the run reads ended (polling its record, as the collection does), then the host is read at
    once: a run that reads ended must find the host no longer busy with it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            run: dict[str, Any] = world.client.get(f"/runs/{run_id}", timeout=10).json()
            if run.get("outcome") not in ("running", None):
                st = _status(world)
                if st.get("run_id") == run_id and st["state"] == "switching":
                    done.violations.append(
                        f"[reader] run {run_id} reads {run['outcome']} while the host still switches for it"
                    )
                done.said.append(f"run {run_id} {run['kind']} {run.get('profile')}: {run['outcome']}")
                return run
        except (httpx.HTTPError, ValueError):
            pass  # the daemon restarts: not yet
        time.sleep(0.05)
    done.violations.append(f"[settle] run {run_id} did not end within {within_s:.0f}s")
    return None


def _parked(world: World) -> str:
    parked = [p["profile"] for p in _status(world).get("parked", [])]
    return parked[0] if parked else PARKS[0]


def _activate(world: World, profile: str, done: Done, *, force: bool = False) -> int | None:
    return _start(world, "POST", f"/profiles/{profile}/activate", done, params={"force": force})


def _begin_job(world: World, job: str | None, profile: str, done: Done) -> int | None:
    """Start one of the jobs a cancel or a kill lands in (without waiting for it)."""
    match job:
        case "activate":
            return _activate(world, profile, done, force=True)
        case "bench":
            return _start(
                world, "POST", "/benchmarks", done, json=BENCH | {"max_tokens": 64, "num_prompts": 4}
            )
        case "experiment":
            body = {"profiles": [profile, GOOD[(GOOD.index(profile) + 1) % 3] if profile in GOOD else GOOD[0]],
                    "benchmark": BENCH, "rounds": 2}  # fmt: skip
            return _start(world, "POST", "/experiments", done, json=body)
        case "unpark":
            return _start(world, "POST", f"/profiles/{_parked(world)}/unpark", done)
    return None


def _finish(world: World, run_id: int | None, done: Done) -> None:
    if run_id is not None:
        wait_run(world, run_id, done)


def _both(first: Callable[[], None], second: Callable[[], None]) -> None:
    """Two clients at once."""
    t = threading.Thread(target=second)
    t.start()
    first()
    t.join()


def perform(world: World, step: Step) -> Done:
    done = Done()
    a = step.args
    match step.kind:
        case "activate":
            _finish(world, _activate(world, a["profile"], done, force=a.get("force", False)), done)
        case "unpark":  # whichever is parked now (the first parking profile if none: a 404)
            _finish(world, _start(world, "POST", f"/profiles/{_parked(world)}/unpark", done), done)
        case "warm":
            _finish(world, _start(world, "POST", f"/profiles/{a['profile']}/warm", done), done)
        case "bench":
            _finish(world, _start(world, "POST", "/benchmarks", done, json=BENCH), done)
        case "capacity":
            _finish(world, _start(world, "POST", "/benchmarks", done, json=CAPACITY), done)
        case "experiment":
            body = {"profiles": a["profiles"], "benchmark": BENCH, "rounds": 2}
            _finish(world, _start(world, "POST", "/experiments", done, json=body), done)
        case "teardown":
            _finish(world, _start(world, "POST", "/teardown", done), done)
        case "job":  # a daemon kill's job without the kill (perf/simulate.py's long run, after its warm-up)
            _finish(world, _begin_job(world, a.get("job"), a["profile"], done), done)
        case "cancel":
            run_id = _begin_job(world, a["job"], a["profile"], done)
            if run_id is not None:
                time.sleep(a["after_s"])  # the moment drawn from the seed
                _start(world, "POST", f"/runs/{run_id}/cancel", done)
            _finish(world, run_id, done)
        case "daemon_kill":
            run_id = _begin_job(world, a.get("job"), a["profile"], done)
            time.sleep(a["after_s"])
            old = world.daemon_pid()
            world.kill_daemon()
            world.wait_daemon(old_pid=old)
            done.said.append(f"daemon {old} SIGKILLed, restarted")
            _finish(world, run_id, done)
        case "engine_crash" | "engine_hang":
            if (active := _active(world)) is None:
                done.said.append("no engine serves")
            else:
                sig = "KILL" if step.kind == "engine_crash" else "STOP"
                serving = _status(world).get("serving_run_id")
                done.said.append(f"SIG{sig} to {active}: {world.signal_engine(active, sig)}")
                if sig == "KILL":
                    _noticed(world, serving, done)
                if sig == "STOP" and a.get("for_s") is not None:
                    time.sleep(a["for_s"])
                    done.said.append(f"SIGCONT after {a['for_s']}s: {world.signal_engine(active, 'CONT')}")
        case "disk_full":
            _disk_full(world, a, done)
        case "concurrent":
            _concurrent(world, a, done)
        case _:
            raise ValueError(f"unknown step {step.kind!r}")
    return done


def _noticed(world: World, serving: int | None, done: Done, within_s: float = 60) -> None:
    """Until the daemon has seen the crash: the serving run it ended (the unit's state comes by an event,
    and the walk must not check the host before the daemon could know)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if _status(world).get("serving_run_id") != serving:
            return
        time.sleep(0.05)
    done.violations.append(
        f"[units] the crash of serving run {serving} was not noticed within {within_s:.0f}s"
    )


def _disk_full(world: World, a: dict[str, Any], done: Done) -> None:
    """The state's disk fills before a switch (refused: 503) or while it runs: the switch goes on, what
    happened held in memory (its record reads running until the disk has room: the host is watched
    meanwhile), then the disk is freed and the held records are written."""
    during = a.get("after_s")
    run_id = None if during is None else _activate(world, a["profile"], done, force=True)
    if during is not None:
        time.sleep(during)
    written = world.fill_disk()
    try:
        if during is None:
            run_id = _activate(world, a["profile"], done, force=True)
        elif run_id is not None:
            deadline = time.monotonic() + RUN_WITHIN_S
            while _status(world)["state"] == "switching" and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        world.free_disk()
    done.said.append(f"disk filled ({written >> 20} MiB), then freed")
    _finish(world, run_id, done)


def _concurrent(world: World, a: dict[str, Any], done: Done) -> None:
    ids: list[int | None] = []

    def first() -> None:
        ids.append(_activate(world, a["profile"], done))

    def second() -> None:
        match a["other"]:
            case "activate":
                ids.append(_activate(world, a["other_profile"], done))
            case "bench":
                ids.append(_start(world, "POST", "/benchmarks", done, json=BENCH))
            case "teardown":
                ids.append(_start(world, "POST", "/teardown", done))
            case "unpark":
                ids.append(_start(world, "POST", f"/profiles/{_parked(world)}/unpark", done))
            case "warm":
                ids.append(_start(world, "POST", f"/profiles/{a['other_profile']}/warm", done))

    _both(first, second)
    for run_id in ids:
        _finish(world, run_id, done)
