"""What a run is: its kinds, phases and outcomes (the words the database, the API, SSE and the log share)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypedDict


class RunKind(enum.StrEnum):
    SWITCH = "switch"
    ROLLBACK = "rollback"
    TEARDOWN = "teardown"
    SERVING = "serving"  # from active until the engine stops, crashes or is switched away
    EXTERNAL = "external"  # a managed unit changed by someone else (systemctl)
    BENCHMARK = "benchmark"  # load levels against the active profile
    EXPERIMENT = "experiment"  # switch, benchmark, next profile; then restore
    WARM = "warm"  # a profile's weight files read into the page cache
    UNPARK = "unpark"  # a parked engine stopped on request (its host RAM and GPU residual freed)
    GPU_RESET = "gpu_reset"  # k25-ctl gpus reset: stop, teardown, the reset command, the readings again
    GPU_ACK = "gpu_ack"  # an operator cleared GPUs' health marks by hand (no reset)


class Phase(enum.StrEnum):
    CREATED = "created"
    DRAINING = "draining"  # out of rotation (/ready 503); the serving engine finishes its requests
    STOP = "stop"
    TEARDOWN = "teardown"
    START = "start"
    LOADING = "loading"
    PROBING = "probing"
    CLEANUP = "cleanup"  # after a failure: stopping the engine that failed, tearing down again
    ROLLBACK = "rollback"
    SERVING = "serving"
    UNHEALTHY = "unhealthy"
    MEASURING = "measuring"  # a benchmark level (warm-ups, then the measured requests)
    SWITCHING = "switching"  # an experiment waits for a switch it started
    RESTORING = "restoring"  # an experiment (or its cancel) brings the previous profile back
    WARMING = "warming"  # weight files read into the page cache (a warm run, or a switch's own warm)
    PARKING = "parking"  # the engine switched away from sleeps instead of stopping (or says why not)
    WAKING = "waking"  # a parked engine wakes: its weights back on the GPUs, then the probe
    RESET = "reset"  # the GPU reset command, and the health readings after it
    # Final phases: a run that ended stays on the phase named for its outcome.
    ACTIVE = "active"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    OK = "ok"
    CRASHED = "crashed"
    STOPPED = "stopped"
    SKIPPED = "skipped"


class Outcome(enum.StrEnum):
    RUNNING = "running"
    ACTIVE = "active"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"
    OK = "ok"
    CRASHED = "crashed"  # a serving engine exited on its own
    STOPPED = "stopped"  # a serving run ended by a switch or an operator
    SKIPPED = "skipped"  # a scheduled experiment that found the host busy, degraded or serving too much

    @property
    def phase(self) -> Phase:
        return Phase(self.value) if self is not Outcome.RUNNING else Phase.CREATED


FINAL_OUTCOMES = tuple(o for o in Outcome if o is not Outcome.RUNNING)
# How a run ends when it did not do what it was for (the CLI exits 3 for these).
UNSUCCESSFUL = frozenset({Outcome.FAILED, Outcome.CANCELLED, Outcome.INTERRUPTED, Outcome.CRASHED})


class RunEventJson(TypedDict, total=False):
    """A run's event as its followers get it (SSE): stored events carry `at` as ISO text, live ones as
    epoch seconds; the final event says so, and names the rollback a failed switch started."""

    id: int | None
    run_id: int
    phase: str
    detail: str
    at: float | str
    final: bool
    rollback_run_id: int | None
    progress_percent: int
    progress_done: int
    progress_total: int


@dataclass(frozen=True)
class Progress:
    """How far a run is: percent, and done of total in the run's own unit (weight shards of a switch's
    load, MiB of a warm, requests of a benchmark level)."""

    percent: int
    done: int
    total: int


@dataclass(frozen=True)
class NewRun:
    """What a run starts with: what it is, where it came from, and what exactly it runs."""

    kind: RunKind
    profile: str | None
    from_profile: str | None = None
    parent_id: int | None = None
    argv: list[str] | None = None  # the rendered command line the unit executes
    profile_sha256: str | None = None
    unit: str | None = None
    engine_version: str | None = None  # the engine as installed (daemon/installed/), where known


@dataclass(frozen=True)
class CutShort:
    """A switch or rollback the daemon was in the middle of when it stopped."""

    run_id: int
    kind: RunKind
    profile: str
    from_profile: str | None
    phase: Phase
