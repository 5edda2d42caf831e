"""`park_level = "auto"` (opt-in, vLLM): which level a park takes, and why, pure. Level 1 keeps the wake
fast (a copy back from pinned host RAM) but pins the weights' bytes of unswappable RAM for as long as the
engine is parked; level 2 pins nothing and reloads the weights at the wake, fast where they are resident
in the page cache. So: level 2 where the weights are resident and shared with another parked profile (one
copy in the page cache serves both), or where level 1 would not fit in host RAM without stopping another
parked engine; level 1 otherwise. A speculative profile always takes level 1 (level 2 loses the drafter's
weights: vllm#52479, #55013)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from daemon.core.hoststate import ParkedInfo
from daemon.core.profiles import Profile
from daemon.parking.budget import RamBudget
from daemon.parking.costs import Way
from daemon.parking.forecast import ParkForecast
from daemon.parking.guards import NoRoom

GB = 1e9
RESIDENT = 0.99  # weights this resident count as in the page cache


def at_level(p: Profile, level: int) -> Profile:
    """The profile as it parks at `level` (what the engine's calls, the budget and the forecast read)."""
    return p.model_copy(update={"park_level": level})


@dataclass(frozen=True)
class Choice:
    level: int
    why: str


def choose(p: Profile, *, no_room: str | None, shared_with: str | None, ways: dict[int, Way]) -> Choice:
    """`no_room`: why level 1 would not fit (None: it fits as it is); `shared_with`: a parked profile on
    the same weight files, resident in the page cache (None: none)."""
    one, two = ways[1], ways[2]
    if p.speculative is not None:
        return Choice(1, "speculative: level 2 would lose the drafter's weights (vllm#52479, #55013)")
    if shared_with is not None:
        why = f"its weights are resident in the page cache and shared with parked {shared_with}"
        return Choice(2, f"{why}: a {two.wake_s:.1f}s reload pins nothing")
    if no_room is not None:
        return Choice(2, f"level 1 would not fit: {no_room}")
    return Choice(1, f"a fast wake ({one.wake_s:.1f}s) and its {one.ram_bytes / GB:.1f} GB fit in host RAM")


def describe(choice: Choice, ways: dict[int, Way]) -> str:
    """The run's words: the level, why, and each way's predicted seconds and RAM."""
    each = "; ".join(
        f"level {n}: park {w.park_s:.1f}s, wake {w.wake_s:.1f}s, {w.ram_bytes / GB:.1f} GB pinned"
        for n, w in sorted(ways.items())
    )
    return f"park_level auto: level {choice.level}, {choice.why} (predicted {each})"


async def decide(
    p: Profile,
    *,
    main_pid: int,
    forecast: ParkForecast,
    budget: RamBudget,
    parked: list[tuple[Profile, ParkedInfo]],  # the other parked engines: their profiles and records
) -> tuple[Profile, str]:
    """The profile at the level this park takes, and the run's words for it."""
    weights = await asyncio.to_thread(forecast.weights, p)  # one residency scan for both ways
    ways = {n: forecast.way_with(at_level(p, n), main_pid, weights) for n in (1, 2)}
    resident = weights[1]
    same = (q.name for q, _ in parked if q.model == p.model)
    shared = next(same, None) if resident >= RESIDENT else None
    try:
        plan = await budget.plan(at_level(p, 1), [info for _, info in parked])
        no_room = (
            f"it would stop parked {', '.join(o.profile for o in plan.evict)} first" if plan.evict else None
        )
    except NoRoom as e:
        no_room = str(e)
    choice = choose(p, no_room=no_room, shared_with=shared, ways=ways)
    return at_level(p, choice.level), describe(choice, ways)
