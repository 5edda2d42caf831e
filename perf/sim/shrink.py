"""Shrinking a failing trace: first the prefix up to the step that failed, then delta debugging (Zeller's
ddmin: drop chunks of halving size, keep any smaller trace that still fails the same way). A candidate
fails when any of `attempts` replays fails with the same signature: the walk has timings, so one pass
of a trace that failed is not proof that it no longer does."""

from __future__ import annotations

import logging
from collections.abc import Callable

from perf.sim.steps import Step

log = logging.getLogger("k25.sim")

Fails = Callable[[list[Step]], frozenset[str] | None]  # a trace -> its failure's signature, or None


def still_fails(run: Fails, steps: list[Step], signature: frozenset[str], attempts: int) -> bool:
    for _ in range(attempts):
        got = run(steps)
        if got is not None and got & signature:
            return True
    return False


def shrink(
    steps: list[Step], failed_at: int, signature: frozenset[str], run: Fails, *, attempts: int = 2
) -> list[Step]:
    """The shortest trace found that still fails with `signature` (the prefix through `failed_at`, then
    ddmin over it)."""
    current = steps[: failed_at + 1]
    chunks = 2
    while len(current) > 1:
        size = max(1, len(current) // chunks)
        reduced = False
        for start in range(0, len(current), size):
            candidate = current[:start] + current[start + size :]
            if candidate and still_fails(run, candidate, signature, attempts):
                log.info("shrink: %d -> %d steps", len(current), len(candidate))
                current, chunks, reduced = candidate, max(chunks - 1, 2), True
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(current), chunks * 2)
    return current
