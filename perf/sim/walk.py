"""A walk: the steps done one after another against one world, the host settled and every invariant checked
after each, the first violation ending it. `simulate` boots its own world for one trace (a replay, a shrink
candidate, a regression test)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.sim.invariants import settle, settled_check
from perf.sim.steps import Step, perform
from perf.sim.world import World, booted

log = logging.getLogger("k25.sim")


@dataclass
class StepRecord:
    index: int
    step: Step
    seconds: float  # the step itself, its settling and its checks
    said: list[str]
    violations: list[str]


@dataclass
class Result:
    steps: list[Step]
    records: list[StepRecord] = field(default_factory=list)
    checks: int = 0  # invariant checks that passed

    @property
    def failed_at(self) -> int | None:
        return next((r.index for r in self.records if r.violations), None)

    @property
    def violations(self) -> list[str]:
        return [v for r in self.records for v in r.violations]

    def signature(self) -> frozenset[str]:
        """What kind of failure this is: the tags of its violations ([one-job], [runs], ...)."""
        return frozenset(m.group(1) for v in self.violations if (m := re.match(r"\[([a-z-]+)\]", v)))

    def trace(self) -> str:
        lines = []
        for r in self.records:
            mark = "VIOLATION" if r.violations else "ok"
            lines.append(f"  {r.index:4d} {r.seconds:6.1f}s {mark:9} {r.step.text()}")
            lines += [f"         {s}" for s in r.said]
            lines += [f"         !! {v}" for v in r.violations]
        return "\n".join(lines)


def walk(world: World, steps: list[Step], *, on_step: Callable[[StepRecord], None] | None = None) -> Result:
    result = Result(steps)
    for i, step in enumerate(steps):
        began = time.monotonic()
        done = perform(world, step)
        violations = done.violations + settle(world)
        if not violations:
            found, _ = settled_check(world)
            violations += found
        record = StepRecord(i, step, time.monotonic() - began, done.said, violations)
        result.records.append(record)
        if on_step is not None:
            on_step(record)
        if violations:
            log.warning("step %d (%s): %s", i, step.text(), "; ".join(violations))
            break
        result.checks += 1
    return result


def simulate(steps: list[Step]) -> Result:
    """The trace on a fresh world."""
    with booted() as world:
        return walk(world, steps)


def save_trace(path: Path, steps: list[Step], *, why: str, seed: int | None) -> None:
    """A trace as a regression test reads it (tests/system/sim_traces/)."""
    doc: dict[str, Any] = {"seed": seed, "why": why, "steps": [s.as_json() for s in steps]}
    path.write_text(json.dumps(doc, indent=1) + "\n")


def load_trace(path: Path) -> list[Step]:
    return [Step(s["kind"], s["args"]) for s in json.loads(path.read_text())["steps"]]
