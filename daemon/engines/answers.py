"""The known answer: a small fixed set of greedy requests whose answer a healthy engine gives token for
token, every time, in the same process with the same weights. A wake is proven by this answer, not by
liveness: SGLang's release without a CPU backup and vLLM's level 2 without reload_weights both answer
/health 200 and generate fluent-looking garbage (docs/engines.md, "Parking: sleep, release, wake").

The requests are OpenAI-shaped (both engines serve them); an engine adds what makes its answer exact
(`Engine.answer_extras`: vLLM's token ids). 20 + 12 tokens, one after the other (a batch of one): at the
seed's 82 tok/s single stream about 0.4 s."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from daemon.core.jsontypes import ForeignJson, RequestBody

if TYPE_CHECKING:
    from daemon.core.profiles import Profile

SEED = 0


class AnswerKind(enum.StrEnum):
    COMPLETION = "completion"
    CHAT = "chat"


@dataclass(frozen=True)
class AnswerRequest:
    kind: AnswerKind
    prompt: str
    max_tokens: int


REQUESTS = (
    AnswerRequest(AnswerKind.COMPLETION, "The capital of France is", 20),
    AnswerRequest(AnswerKind.CHAT, "Name the three primary colours.", 12),
)


@dataclass(frozen=True)
class Answer:
    """One request's greedy answer: its text and its tokens (token ids where the engine gives them, else
    the logprob token strings, else empty: then the text is compared)."""

    kind: AnswerKind
    prompt: str
    text: str
    tokens: tuple[str, ...] = ()

    def units(self) -> tuple[str, ...]:
        """What is compared position by position: the tokens, or the characters without them."""
        return self.tokens if self.tokens else tuple(self.text)

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "prompt": self.prompt,
            "text": self.text,
            "tokens": list(self.tokens),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Answer:
        tokens = data.get("tokens") or []
        return cls(
            AnswerKind(str(data["kind"])),
            str(data["prompt"]),
            str(data["text"]),
            tuple(str(t) for t in tokens) if isinstance(tokens, list) else (),
        )


def request_body(
    profile: Profile, req: AnswerRequest, extras: Mapping[str, object]
) -> tuple[str, RequestBody]:
    """The path and body of one known-answer request: greedy, seeded, whole (not streamed), logprobs."""
    body: RequestBody = {
        "model": profile.served_model_name or profile.model,
        "max_tokens": req.max_tokens,
        "temperature": 0,
        "seed": SEED,
        "stream": False,
    }
    body |= dict(extras)
    if req.kind is AnswerKind.CHAT:
        body |= {"messages": [{"role": "user", "content": req.prompt}], "logprobs": True, "top_logprobs": 0}
        return "/v1/chat/completions", body
    return "/v1/completions", body | {"prompt": req.prompt, "logprobs": 0}


class BadAnswer(ValueError):
    pass


def parse_answer(req: AnswerRequest, data: ForeignJson) -> Answer:
    """The answer in an engine's JSON response: `token_ids` (vLLM's return_token_ids) over logprob tokens
    (completions: logprobs.tokens; chat: logprobs.content[].token)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadAnswer(f"no choices in the answer: {str(data)[:200]}")
    choice = choices[0]
    if req.kind is AnswerKind.CHAT:
        message = choice.get("message") or {}
        text = message.get("content") if isinstance(message, dict) else None
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise BadAnswer(f"no text in the answer: {str(choice)[:200]}")
    return Answer(req.kind, req.prompt, text, _tokens(choice))


def _tokens(choice: dict[str, object]) -> tuple[str, ...]:
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return tuple(str(i) for i in ids)
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return ()
    tokens = lp.get("tokens")
    if isinstance(tokens, list):
        return tuple(str(t) for t in tokens)
    content = lp.get("content")
    if isinstance(content, list):
        return tuple(str(c.get("token")) for c in content if isinstance(c, dict))
    return ()


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
    by_kind = {a.kind: a for a in theirs}
    rows = []
    for a in mine:
        b = by_kind.get(a.kind)
        if b is None or b.prompt != a.prompt:
            continue
        n = len(a.units())
        rows.append((a.kind, first_difference(a, b), n))
    return Agreement(other, tuple(rows)) if rows else None


def shorten(text: str, limit: int = 40) -> str:
    """An answer as a run event quotes it."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")
