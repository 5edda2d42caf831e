"""The known answer: a small fixed set of greedy requests whose answer a healthy engine gives token for
token, every time, in the same process with the same weights. A wake is proven by this answer, not by
liveness: SGLang's release without a CPU backup and vLLM's level 2 without reload_weights both answer
/health 200 and generate fluent-looking garbage (docs/engines.md, "Parking: sleep, release, wake").

The requests are OpenAI-shaped (both engines serve them: vLLM's and SGLang's OpenAI servers take
`logprobs` and `top_logprobs`); an engine adds what makes its answer exact (`Engine.answer_extras`: vLLM's
token ids). Each answer keeps the top-5 logprobs of every generated token: its fingerprint, which moves
when the weights move even where the greedy tokens do not (daemon/proving/fingerprint.py). The third
request spans many KV-cache blocks (about 30 of vLLM's 16-token blocks) and is also served before a park,
so that a prefix cache that outlived the sleep shows. 12 + 8 + 6 tokens, one after the other (a batch of
one): at the seed's 82 tok/s single stream about 0.32 s (and 8 more per LoRA adapter)."""

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
    adapter: str = ""  # a LoRA adapter the request is served by ("": the base model)


TOP_LOGPROBS = 5  # alternatives per position in the fingerprint
# Many KV blocks of a prompt no answer shares a prefix with: ~500 tokens (~30 blocks of 16), well inside
# a 1024-token context.
LONG_PROMPT = " ".join(
    f"Item {i}: the river carries boat {i * 7 % 31} past bridge {i % 13}." for i in range(24)
)
REQUESTS = (
    AnswerRequest(AnswerKind.COMPLETION, "The capital of France is", 12),
    AnswerRequest(AnswerKind.CHAT, "Name the three primary colours.", 8),
    AnswerRequest(AnswerKind.COMPLETION, LONG_PROMPT + "\nThe last item was", 6),
)
ADAPTER_PROMPT, ADAPTER_TOKENS = REQUESTS[0].prompt, 8


def requests_for(profile: Profile) -> tuple[AnswerRequest, ...]:
    """The known-answer requests of a profile: the fixed three, and one per LoRA adapter it serves."""
    adapters = (
        AnswerRequest(AnswerKind.COMPLETION, ADAPTER_PROMPT, ADAPTER_TOKENS, a) for a in profile.lora_adapters
    )
    return (*REQUESTS, *sorted(adapters, key=lambda r: r.adapter))


PRIMING = REQUESTS[2]  # served before a park: a stale prefix-cache hit after the wake shows in its answer
Position = tuple[float, tuple[tuple[str, float], ...]]  # the chosen token's logprob, the top alternatives


@dataclass(frozen=True)
class Answer:
    """One request's greedy answer: its text and its tokens (token ids where the engine gives them, else
    the logprob token strings, else empty: then the text is compared)."""

    kind: AnswerKind
    prompt: str
    text: str
    tokens: tuple[str, ...] = ()
    logprobs: tuple[Position, ...] = ()  # per generated token; () where the engine gave none
    adapter: str = ""  # the LoRA adapter that answered ("": the base model)

    def units(self) -> tuple[str, ...]:
        """What is compared position by position: the tokens, or the characters without them."""
        return self.tokens if self.tokens else tuple(self.text)

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "prompt": self.prompt,
            "text": self.text,
            "tokens": list(self.tokens),
            "logprobs": [[lp, [list(t) for t in top]] for lp, top in self.logprobs],
            "adapter": self.adapter,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Answer:
        tokens, logprobs = data.get("tokens") or [], data.get("logprobs") or []
        return cls(
            AnswerKind(str(data["kind"])),
            str(data["prompt"]),
            str(data["text"]),
            tuple(str(t) for t in tokens) if isinstance(tokens, list) else (),
            _positions(logprobs),
            str(data.get("adapter") or ""),
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
        chat = {"messages": [{"role": "user", "content": req.prompt}], "logprobs": True}
        return "/v1/chat/completions", body | chat | {"top_logprobs": TOP_LOGPROBS}
    return "/v1/completions", body | {"prompt": req.prompt, "logprobs": TOP_LOGPROBS}


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
    return Answer(req.kind, req.prompt, text, _tokens(choice), _choice_logprobs(choice), req.adapter)


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


def _choice_logprobs(choice: dict[str, object]) -> tuple[Position, ...]:
    """Each generated token's logprob and top alternatives: completions' `token_logprobs` and
    `top_logprobs` (a {token: logprob} per position), chat's `content[].logprob` and `.top_logprobs`."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return ()
    content = lp.get("content")
    if isinstance(content, list):
        return tuple(
            (
                _float(c.get("logprob")),
                _top([(t.get("token"), t.get("logprob")) for t in c.get("top_logprobs") or []]),
            )
            for c in content
            if isinstance(c, dict)
        )
    chosen, tops = lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
    if not isinstance(chosen, list) or not isinstance(tops, list):
        return ()
    tops = tops + [None] * (len(chosen) - len(tops))
    return tuple(
        (_float(c), _top(list(t.items()) if isinstance(t, dict) else []))
        for c, t in zip(chosen, tops, strict=False)
    )


def _top(pairs: list[tuple[object, object]]) -> tuple[tuple[str, float], ...]:
    return tuple((str(t), _float(v)) for t, v in pairs if isinstance(t, str))


def _float(v: object) -> float:
    """A logprob as served (a float; JSON's null or -inf where an engine had none: very unlikely)."""
    return float(v) if isinstance(v, (int, float)) else float("-inf")


def _positions(data: object) -> tuple[Position, ...]:
    """Stored logprobs back ([[lp, [[token, lp], ...]], ...]); () for a record from before them."""
    if not isinstance(data, list):
        return ()
    out = []
    for item in data:
        if isinstance(item, list) and len(item) == 2 and isinstance(item[1], list):
            out.append(
                (_float(item[0]), _top([tuple(t) for t in item[1] if isinstance(t, list) and len(t) == 2]))
            )
    return tuple(out)
