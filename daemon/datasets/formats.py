"""Imported prompt files, checked line by line: OpenAI-format JSONL (what `vllm bench serve --dataset-name
custom` reads: `{"prompt": ..., "output_tokens": N}`; chat lines with `messages`; OpenAI batch lines with
`url` and `body`; k25-ctl's own capture export) and ShareGPT JSON (a list of conversations: the first human
turn is the prompt, the reply's length its output length). A bad file is refused whole, with one error
that names its line. Pure."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Literal

from daemon.core.errors import InvalidInput
from daemon.core.jsontypes import RequestBody
from daemon.datasets.shapes import CATEGORY, Endpoint, endpoint_of, replayable

Format = Literal["openai", "sharegpt"]
CHARS_PER_TOKEN = 4  # ShareGPT replies are text: their length in tokens is estimated (no tokenizer here)
MAX_PROMPTS = 100_000
_CATEGORY = re.compile(CATEGORY)


@dataclass(frozen=True)
class Imported:
    endpoint: Endpoint
    body: RequestBody  # {"prompt" | "messages", "params"}
    category: str | None = None
    output_tokens: int | None = None
    at: float | None = None  # arrival (Unix seconds), when the file says


def detect(text: str) -> Format:
    """ShareGPT files are one JSON array; JSONL files are objects, one per line."""
    return "sharegpt" if text.lstrip().startswith("[") else "openai"


def parse(text: str, fmt: Format | None = None) -> list[Imported]:
    fmt = fmt or detect(text)
    out = _openai(text) if fmt == "openai" else _sharegpt(text)
    if not out:
        raise InvalidInput(f"the {fmt} file holds no prompts")
    if len(out) > MAX_PROMPTS:
        raise InvalidInput(f"the file holds {len(out)} prompts; at most {MAX_PROMPTS}")
    return out


def _openai(text: str) -> list[Imported]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(_openai_line(json.loads(line)))
        except ValueError as e:  # json's errors included
            raise InvalidInput(f"line {n}: {e}") from None
    return out


def _openai_line(obj: object) -> Imported:
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    endpoint: Endpoint | None = None
    request = obj
    if isinstance(obj.get("body"), dict):  # an OpenAI batch line
        endpoint = endpoint_of(str(obj.get("url") or ""))
        if endpoint is None:
            raise ValueError(f"'url' must be /v1/completions or /v1/chat/completions, not {obj.get('url')!r}")
        request = obj["body"]
    elif isinstance(obj.get("endpoint"), str):  # k25-ctl's capture export
        endpoint = "chat" if obj["endpoint"] == "chat" else "completions"
    endpoint, body = replayable(request, endpoint)
    at = obj.get("at")
    if at is not None and (isinstance(at, bool) or not isinstance(at, int | float)):
        raise ValueError("'at' must be a number (Unix seconds)")
    return Imported(endpoint, body, _category(obj.get("category")), _length(obj.get("output_tokens")), at)


def _category(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _CATEGORY.match(value):
        raise ValueError(f"'category' must be a short name (letters, digits, _ . -), not {value!r}")
    return value.lower()


def _length(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"'output_tokens' must be a whole number >= 1, not {value!r}")
    return value


def _sharegpt(text: str) -> list[Imported]:
    out = []
    for line, item in _array(text):
        try:
            if (got := _conversation(item)) is not None:
                out.append(got)
        except ValueError as e:
            raise InvalidInput(f"line {line}: {e}") from None
    return out


HUMAN = ("human", "user")
ASSISTANT = ("gpt", "assistant", "chatgpt", "bard", "bing")


def _conversation(item: object) -> Imported | None:
    """The first human turn and the reply after it; None for a conversation without one (vLLM skips
    those too)."""
    if not isinstance(item, dict):
        raise ValueError("expected a conversation object")
    turns = item.get("conversations", item.get("conversation"))
    if not isinstance(turns, list):
        raise ValueError("expected 'conversations': a list of {from, value} turns")
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ValueError(f"turn {i} must be an object with a 'value' string")
    first = next((i for i, t in enumerate(turns) if t.get("from") in HUMAN and t["value"].strip()), None)
    if first is None:
        return None
    reply = next((t["value"] for t in turns[first + 1 :] if t.get("from") in ASSISTANT), None)
    length = max(1, math.ceil(len(reply) / CHARS_PER_TOKEN)) if reply else None
    body: RequestBody = {"messages": [{"role": "user", "content": turns[first]["value"]}], "params": {}}
    return Imported("chat", body, _category(item.get("category")), length)


def _array(text: str) -> list[tuple[int, object]]:
    """The elements of a top-level JSON array, each with the line it starts on."""
    decoder = json.JSONDecoder()

    def line_at(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        return pos

    pos = skip(0)
    if not text.startswith("[", pos):
        raise InvalidInput(f"line {line_at(pos)}: a ShareGPT file is a JSON array ('[' first)")
    pos = skip(pos + 1)
    out: list[tuple[int, object]] = []
    if text.startswith("]", pos):
        return out
    while True:
        try:
            item, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InvalidInput(f"line {e.lineno}: not JSON ({e.msg})") from None
        out.append((line_at(pos), item))
        pos = skip(end)
        if text.startswith(",", pos):
            pos = skip(pos + 1)
        elif text.startswith("]", pos):
            return out
        else:
            raise InvalidInput(f"line {line_at(pos)}: expected ',' or ']' after an element")
