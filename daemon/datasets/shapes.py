"""What a replayable request is: an OpenAI completions or chat body reduced to its prompt (or messages) and
its sampling parameters. The same reduction serves the capture sink and the importers, so a captured
request and an imported line are stored alike. Pure."""

from __future__ import annotations

import json
from typing import Literal

from daemon.core.jsontypes import RequestBody

Endpoint = Literal["completions", "chat"]
PATHS: dict[Endpoint, str] = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
NUMBERS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)
# Kept: what changes what the engine generates (temperature matters for acceptance). Everything else (user
# ids, metadata, tools, logit_bias, stream options) is dropped.
SAMPLING_KEYS = (*NUMBERS, "stop")
CATEGORY = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$"


def endpoint_of(path: str) -> Endpoint | None:
    """`/v1/chat/completions` -> chat, `/v1/completions` -> completions (a /capture prefix is allowed)."""
    path = path.removeprefix("/capture").rstrip("/")
    for endpoint, p in PATHS.items():
        if path == p:
            return endpoint
    return None


def replayable(obj: object, endpoint: Endpoint | None = None) -> tuple[Endpoint, RequestBody]:
    """(endpoint, {"prompt" | "messages": ..., "params": {...}}); ValueError says what is wrong. Without an
    endpoint (an imported line) `messages` means chat and `prompt` completions."""
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    out: RequestBody
    if endpoint == "chat" or (endpoint is None and "messages" in obj):
        out, endpoint = {"messages": _messages(obj.get("messages"))}, "chat"
    else:
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("expected 'prompt' (a non-empty string) or 'messages' (a list)")
        out, endpoint = {"prompt": prompt}, "completions"
    return endpoint, out | {"params": _params(obj)}


def _messages(messages: object) -> list[RequestBody]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list")
    out: list[RequestBody] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or "content" not in m:
            raise ValueError(f"messages[{i}] must be an object with 'role' and 'content'")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _params(obj: RequestBody) -> RequestBody:
    params: RequestBody = {}
    for key in NUMBERS:
        value = obj.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"'{key}' must be a number, not {json.dumps(value)[:40]}")
        params[key] = value
    stop = obj.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise ValueError("'stop' must be a string or a list of strings")
        params["stop"] = stop
    return params


def prompt_text(body: RequestBody) -> str:
    """The text of a stored prompt (messages joined), for a salt and for the fake engine's topic."""
    if isinstance(prompt := body.get("prompt"), str):
        return prompt
    parts = []
    for m in body.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        parts.append(content if isinstance(content, str) else json.dumps(content))
    return "\n".join(parts)


def salted_body(body: RequestBody, salt: str | None) -> RequestBody:
    """The prompt (or the first message's text) with the run's salt before it: no prefix-cache hits from an
    earlier run, while the run's own requests still share their common prefixes (a system prompt), as in
    production."""
    if not salt:
        return body
    if isinstance(prompt := body.get("prompt"), str):
        return body | {"prompt": f"[{salt}] {prompt}"}
    messages = [dict(m) for m in body.get("messages") or []]
    if messages and isinstance(messages[0].get("content"), str):
        messages[0]["content"] = f"[{salt}] {messages[0]['content']}"
    return body | {"messages": messages}
