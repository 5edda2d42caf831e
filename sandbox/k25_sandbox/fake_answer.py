"""What the fake engine says: a deterministic answer per prompt (greedy, as a real model's is), so a known
answer recorded after a cold start comes back token for token after a good wake; and garbage where the
weights are lost (a release without a CPU backup, a level-2 wake without reload_weights), as the real
engines then answer, with /health 200."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

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
    # The fingerprint's physics: logprobs moved with the tokens unchanged (a slightly wrong restore), on
    # every position or on one shard's positions only (one in SHARDS); engine-like float noise per answer.
    drift: float = 0.0
    shard: int | None = None
    noise: float = 0.0
    failing: bool = False  # every request answers 500 (a wake that threw inside the engine)
    # LoRA adapters served (name -> whether its weights are in place; False: it answers as the base model)
    adapters: dict[str, bool] = field(default_factory=dict)
    # Prompts whose prefix is in the KV cache; `stale`: indexed before a sleep that discarded the blocks.
    cached: set[str] = field(default_factory=set)
    stale: set[str] = field(default_factory=set)


SHARDS = 8
SHARD_DRIFT = 0.3  # nats: what one corrupted shard's slice of the logits moves
LONG_PROMPT_WORDS = 64  # a prompt this long fills KV blocks the prefix cache indexes


def prompt_key(body: RequestBody) -> str:
    if "messages" in body:
        messages = body.get("messages") or []
        return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    return str(body.get("prompt", ""))


def token_ids(weights: Weights, key: str, start: int, n: int) -> list[int]:
    """Tokens start..start+n of the greedy answer to `key`."""
    if not weights.ok or key in weights.stale:  # uninitialised weights, or KV blocks read after they went
        return [GARBAGE_ID] * n
    seed = zlib.crc32(f"{weights.salt}|{key}".encode())
    return [FIRST_ID + (seed + 7919 * i + (seed >> (i % 16))) % len(VOCAB) for i in range(start, start + n)]


def text_of(ids: list[int]) -> str:
    return "".join(" " + (GARBAGE if i == GARBAGE_ID else VOCAB[i - FIRST_ID]) for i in ids)


def served(weights: Weights, key: str) -> None:
    """A request ran: a long prompt's prefix is now in the cache."""
    if len(key.split()) >= LONG_PROMPT_WORDS:
        weights.cached.add(key)


def top_logprobs(weights: Weights, key: str, ids: list[int], k: int) -> list[list[tuple[str, float]]]:
    """Each position's top-k (token, logprob), the chosen token first: deterministic per prompt and
    position, moved by the weights' drift (all positions, or one shard's), plus the answer's noise."""
    seed = zlib.crc32(f"{weights.salt}|{key}".encode())
    jitter = random.Random()  # noqa: S311 (float noise, not a secret)
    out = []
    for pos, chosen in enumerate(ids):
        moved = weights.drift + (
            SHARD_DRIFT if weights.shard is not None and pos % SHARDS == weights.shard else 0.0
        )
        first = -0.05 - ((seed >> (pos % 16)) % 97) / 400
        row = [(chosen, first)]
        row += [
            (FIRST_ID + (chosen - FIRST_ID + j * 5) % len(VOCAB), first - 1.2 * j - moved)
            for j in range(1, k)
        ]
        out.append([(text_of([t]), lp + jitter.uniform(-weights.noise, weights.noise)) for t, lp in row])
    return out


def whole_extras(
    body: RequestBody, ids: list[int], chat: bool, flavor: str, weights: Weights, key: str
) -> RequestBody:
    """A whole answer's extra fields of its choice: vLLM's token_ids where asked, and logprobs with the
    top alternatives where asked (chat: `logprobs` + `top_logprobs`; completions: `logprobs` = k)."""
    out: RequestBody = {}
    if flavor == "vllm" and body.get("return_token_ids"):
        out["token_ids"] = ids
    k = int(str(body.get("top_logprobs") if chat else body.get("logprobs") or 0) or 0)
    tops = top_logprobs(weights, key, ids, max(1, k))
    if chat and body.get("logprobs"):
        out["logprobs"] = {
            "content": [
                {
                    "token": t[0][0],
                    "logprob": t[0][1],
                    "top_logprobs": [{"token": w, "logprob": lp} for w, lp in t[:k]],
                }
                for t in tops
            ]
        }
    elif not chat and body.get("logprobs") is not None:
        out["logprobs"] = {
            "tokens": [t[0][0] for t in tops],
            "token_logprobs": [t[0][1] for t in tops],
            "top_logprobs": [dict(t[:k]) for t in tops] if k else None,
        }
    return out
