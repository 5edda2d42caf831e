"""Whether two known answers agree: where they first differ (by tokens where both have comparable ones,
else by characters), request by request, in words. Pure; not engine-specific: an answer is compared the
same whichever engine gave it (daemon/engines/answers.py asks for it and parses it)."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.engines.answers import Answer, AnswerKind
from daemon.proving import fingerprint
from daemon.proving.fingerprint import paired


def _compared(a: Answer, b: Answer) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    """What two answers are compared by, and whether that is tokens: their tokens where both have tokens
    of one kind, else their characters. vLLM's tokens are ids (return_token_ids), SGLang's are strings
    (logprobs): the same answer from the two engines has equal text and unequal tokens."""
    if a.tokens and b.tokens and _ids(a.tokens) == _ids(b.tokens):
        return a.tokens, b.tokens, True
    return tuple(a.text), tuple(b.text), False


def _ids(tokens: tuple[str, ...]) -> bool:
    return all(t.isdigit() for t in tokens)


def first_difference(a: Answer, b: Answer) -> int | None:
    """The first position (token, or character where the tokens are not comparable) where two answers
    differ; None: equal. A character position is given as the token it falls in, where either answer's
    tokens are its text's pieces (SGLang's strings)."""
    ua, ub, by_tokens = _compared(a, b)
    found = next((i for i, (x, y) in enumerate(zip(ua, ub, strict=False)) if x != y), None)
    if found is None and len(ua) != len(ub):
        found = min(len(ua), len(ub))
    if found is None or by_tokens:
        return found
    return next((_token_at(x, found) for x in (a, b) if x.tokens and "".join(x.tokens) == x.text), found)


def _token_at(answer: Answer, char: int) -> int:
    end = 0
    for i, piece in enumerate(answer.tokens):
        end += len(piece)
        if char < end:
            return i
    return len(answer.tokens)


@dataclass(frozen=True)
class Agreement:
    """How one profile's known answer agrees with another's, request by request: where each first differs
    (None: equal) out of how many tokens (characters where either lacks tokens)."""

    other: str
    requests: tuple[tuple[AnswerKind, int | None, int], ...]

    @property
    def equal(self) -> bool:
        return all(first is None for _, first, _ in self.requests)

    @property
    def from_first_token(self) -> bool:
        """Every request differs at once: a different model, or a drafter that changes the output."""
        return bool(self.requests) and all(first == 0 for _, first, _ in self.requests)

    def describe(self) -> str:
        parts = [
            f"{kind.value}: " + ("equal" if first is None else f"differs from token {first} of {n}")
            for kind, first, n in self.requests
        ]
        return f"vs {self.other}: " + "; ".join(parts)


def agreement(other: str, mine: tuple[Answer, ...], theirs: tuple[Answer, ...]) -> Agreement | None:
    """Request by request, over the requests both answered; None when they share none."""
    rows = []
    for _, a, b in paired(mine, theirs):
        n = len(a.units())
        rows.append((a.kind, first_difference(a, b), n))
    return Agreement(other, tuple(rows)) if rows else None


def shorten(text: str, limit: int = 40) -> str:
    """An answer as a run event quotes it."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")


def differs(now: tuple[Answer, ...], recorded: tuple[Answer, ...], this: str, that: str) -> str | None:
    """What differs first between two sets of answers, in words; None: the same tokens throughout."""
    for _, a, b in paired(now, recorded):
        if (i := first_difference(a, b)) is not None:
            said = f"{this} {shorten(a.text)} vs {that} {shorten(b.text)}"
            which = f"adapter {a.adapter}'s {a.kind}" if a.adapter else str(a.kind)
            return f"the {which} answer differs from token {i}: {said}"
    return None


def judge(now: tuple[Answer, ...], recorded: tuple[Answer, ...], tolerance: float) -> str | None:
    """What a wake's answers got wrong against the record: other tokens, or logprobs moved by more than
    the tolerance (the first position, and by how much); None: the same."""
    if why := differs(now, recorded, "after the wake", "before the park"):
        return why
    moved = fingerprint.drift(now, recorded, tolerance)
    return moved.describe(tolerance) if moved is not None else None
