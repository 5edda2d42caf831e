"""What the fake engine says: a deterministic answer per prompt (greedy, as a real model's is), so a known
answer recorded after a cold start comes back token for token after a good wake; and garbage where the
weights are lost (a release without a CPU backup, a level-2 wake without reload_weights), as the real
engines then answer, with /health 200."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from daemon.core.jsontypes import RequestBody

VOCAB = (
    "Paris",
    "the",
    "capital",
    "of",
    "France",
    "is",
    "a",
    "city",
    "on",
    "Seine",
    "red",
    "blue",
    "yellow",
    "and",
    "colours",
    "are",
    "primary",
    "light",
    "river",
    "known",
    "for",
    "its",
    "art",
    "history",
    "tower",
    "museum",
    "with",
    "many",
    "bridges",
    "people",
    "who",
    "live",
)
GARBAGE = "!!"  # what real engines print from uninitialised weights (token 0 decoded, again and again)
GARBAGE_ID = 0
FIRST_ID = 100


@dataclass
class Weights:
    """Whether the engine's weights hold what was loaded (False: uninitialised memory after a wake that
    did not restore them, until reload_weights)."""

    ok: bool = True
    salt: str = ""  # another model answers other tokens to the same prompt


def prompt_key(body: RequestBody) -> str:
    if "messages" in body:
        messages = body.get("messages") or []
        return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    return str(body.get("prompt", ""))


def token_ids(weights: Weights, key: str, start: int, n: int) -> list[int]:
    """Tokens start..start+n of the greedy answer to `key`."""
    if not weights.ok:
        return [GARBAGE_ID] * n
    seed = zlib.crc32(f"{weights.salt}|{key}".encode())
    return [FIRST_ID + (seed + 7919 * i + (seed >> (i % 16))) % len(VOCAB) for i in range(start, start + n)]


def text_of(ids: list[int]) -> str:
    return "".join(" " + (GARBAGE if i == GARBAGE_ID else VOCAB[i - FIRST_ID]) for i in ids)


def whole_extras(body: RequestBody, ids: list[int], chat: bool, flavor: str) -> RequestBody:
    """A whole answer's extra fields of its choice: vLLM's token_ids where asked, and logprobs."""
    out: RequestBody = {}
    if flavor == "vllm" and body.get("return_token_ids"):
        out["token_ids"] = ids
    words = [text_of([i]) for i in ids]
    if chat and body.get("logprobs"):
        out["logprobs"] = {"content": [{"token": w, "logprob": -0.01, "top_logprobs": []} for w in words]}
    elif not chat and body.get("logprobs") is not None:
        out["logprobs"] = {"tokens": words, "token_logprobs": [-0.01] * len(words)}
    return out
