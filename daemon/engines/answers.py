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
