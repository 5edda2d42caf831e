"""The fingerprint of a known answer: the top-k logprobs of every generated token (daemon/engines/answers.py
asks for them). The same process with the same weights, greedy and alone, gives the same ids and, batch
shape for batch shape, the same logprobs; a weight that moved moves some logit of some position even where
the argmax (the token) stays. Pure.

The tolerance is measured when the answer is recorded: the cold engine is asked twice, and the largest
logprob difference between the two answers (usually 0: bit-identical) sets it, never below FLOOR."""

from __future__ import annotations

import math
from dataclasses import dataclass

from daemon.engines.answers import Answer, Position

# Nats. Far below what corrupted weights move (a flipped exponent bit, a stale shard: tenths and more),
# above the float noise of one engine answering the same batch twice (none to ~1e-4 on GPUs).
FLOOR = 0.01


@dataclass(frozen=True)
class Drift:
    """Where two fingerprints first differ by more than the tolerance: the request, the position (the
    generated token's index), how much (nats) and which logprob."""

    request: int
    position: int
    size: float
    what: str

    def describe(self, tolerance: float) -> str:
        return (
            f"logprobs moved at token {self.position} of request {self.request}: {self.what} by "
            f"{self.size:.4g} nats (tolerance {tolerance:.4g})"
        )


def paired(now: tuple[Answer, ...], recorded: tuple[Answer, ...]) -> list[tuple[int, Answer, Answer]]:
    """The requests both sets answered (by kind, prompt and adapter), in the order of `now`, with their
    index."""
    theirs = {(a.kind, a.prompt, a.adapter): a for a in recorded}
    keys = [(i, a, (a.kind, a.prompt, a.adapter)) for i, a in enumerate(now)]
    return [(i, a, theirs[k]) for i, a, k in keys if k in theirs]


def _position_drift(a: Position, b: Position) -> tuple[float, str]:
    """The largest difference between two positions' logprobs: the chosen token's, each alternative both
    list, and an alternative one lists that the other lacks although it ranks above the other's last."""
    worst, what = _delta(a[0], b[0]), "the chosen token's"
    mine, theirs = dict(a[1]), dict(b[1])
    for token in mine.keys() & theirs.keys():
        if (d := _delta(mine[token], theirs[token])) > worst:
            worst, what = d, f"alternative {token!r}"
    for have, lack in ((mine, theirs), (theirs, mine)):
        if not lack:
            continue
        floor = min(lack.values())
        for token in have.keys() - lack.keys():
            if (d := have[token] - floor) > worst:
                worst, what = d, f"alternative {token!r} (in one top list only)"
    return worst, what


def _delta(x: float, y: float) -> float:
    if math.isinf(x) and math.isinf(y):
        return 0.0
    return abs(x - y)


def drift(now: tuple[Answer, ...], recorded: tuple[Answer, ...], tolerance: float) -> Drift | None:
    """The first position whose logprobs moved by more than `tolerance`; None: within it throughout
    (answers without logprobs, a record from before fingerprints: nothing to compare)."""
    for i, a, b in paired(now, recorded):
        for pos, (x, y) in enumerate(zip(a.logprobs, b.logprobs, strict=False)):
            size, what = _position_drift(x, y)
            if size > tolerance:
                return Drift(i, pos, size, what)
    return None


def largest(now: tuple[Answer, ...], recorded: tuple[Answer, ...]) -> float:
    """The largest logprob difference anywhere between two sets of answers (the record's two asks)."""
    return max(
        (
            _position_drift(x, y)[0]
            for _, a, b in paired(now, recorded)
            for x, y in zip(a.logprobs, b.logprobs, strict=False)
        ),
        default=0.0,
    )


def tolerance(first: tuple[Answer, ...], second: tuple[Answer, ...]) -> float:
    """What the wake's answers may differ by: what two asks of the cold engine differed by, at least FLOOR."""
    return max(largest(first, second), FLOOR)
