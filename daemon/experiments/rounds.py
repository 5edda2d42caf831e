"""The order an experiment measures its profiles in, round by round, so that a drift of the host (heat, a
neighbour, a cache filling) falls on every profile alike: two profiles alternate ABBA (A B, B A, A B...;
the profile that ends a round begins the next, so a round costs one switch), more profiles take a random
order each round (a randomised block design; the seed is the experiment's run id, so it is repeatable)."""

from __future__ import annotations

import random


def orders(profiles: list[str], rounds: int, *, seed: int) -> list[list[str]]:
    if len(profiles) == 2:
        a, b = profiles
        return [[a, b] if r % 2 == 0 else [b, a] for r in range(rounds)]
    if len(profiles) < 2 or rounds == 1:
        return [list(profiles) for _ in range(rounds)]
    rng = random.Random(seed)  # noqa: S311 - an order to measure in, not a secret
    out = [list(profiles)]  # the first round as asked
    for _ in range(rounds - 1):
        order = list(profiles)
        rng.shuffle(order)
        out.append(order)
    return out


def switches(plan: list[list[str]], active: str | None) -> int:
    """The switches the orders take from `active` (consecutive measurements of one profile need none)."""
    n, current = 0, active
    for name in (p for order in plan for p in order):
        n += name != current
        current = name
    return n
