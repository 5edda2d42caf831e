"""Imported files: OpenAI-format JSONL (vLLM's custom dataset, chat lines, OpenAI batch lines, k25-ctl's own
capture export) and ShareGPT JSON become replayable prompts; a bad file is refused with one error naming
its line."""

from __future__ import annotations

import json

import pytest

from daemon.core.errors import InvalidInput
from daemon.datasets.formats import detect, parse
from daemon.datasets.shapes import endpoint_of, replayable, salted_body


def test_openai_jsonl_lines_of_every_shape() -> None:
    lines = [
        {"prompt": "def add(a, b):", "output_tokens": 64, "category": "Code"},  # vllm bench custom
        {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "top_p": 0.9, "user": "u1"},
        {
            "custom_id": "r1",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "x",
                "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
                "max_tokens": 100,
                "stop": "END",
            },
        },
        {
            "at": 1000.5,
            "endpoint": "completions",
            "model": "m",
            "category": "chat",
            "prompt": "p",
            "params": {"temperature": 0.2},
        },
    ]
    got = parse("\n".join(json.dumps(x) for x in lines) + "\n\n")
    assert [g.endpoint for g in got] == ["completions", "chat", "chat", "completions"]
    assert got[0].body == {"prompt": "def add(a, b):", "params": {}}
    assert (got[0].output_tokens, got[0].category) == (64, "code")
    assert got[1].body["params"] == {"temperature": 0.7, "top_p": 0.9}  # the user id is not kept
    assert got[2].body["params"] == {"max_tokens": 100, "stop": ["END"]}
    assert [m["role"] for m in got[2].body["messages"]] == ["system", "user"]
    assert got[3].at == 1000.5
    assert detect("\n".join(json.dumps(x) for x in lines)) == "openai"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"prompt": "a"}\n{"prompt": "b"\n', "line 2: "),
        ('{"prompt": "a"}\n\n{"text": "b"}\n', "line 3: expected 'prompt'"),
        ('{"prompt": "a", "temperature": "hot"}\n', "line 1: 'temperature' must be a number"),
        ('{"prompt": "a"}\n{"prompt": "b", "output_tokens": 0}\n', "line 2: 'output_tokens'"),
        ('{"prompt": "a", "category": "no spaces please"}\n', "line 1: 'category'"),
        ('{"url": "/v1/embeddings", "body": {"input": "x"}}\n', "line 1: 'url' must be"),
        ("[1, 2]\n", "line 1: expected a conversation object"),
        ("", "holds no prompts"),
    ],
)
def test_a_bad_file_gets_one_error_naming_its_line(text: str, where: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse(text, "sharegpt" if text.startswith("[") else "openai")
    assert where in str(e.value), str(e.value)


SHAREGPT = """[
  {"id": "a", "conversations": [
      {"from": "human", "value": "Write a haiku about GPUs"},
      {"from": "gpt", "value": "Silicon rivers, forty watts of thought at rest, tokens fall like rain."}]},
  {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn: skipped, as vLLM does"}]},
  {"id": "c", "category": "chat", "conversations": [{"from": "human", "value": "Hello"}]}
]"""


def test_sharegpt_takes_the_first_human_turn_and_the_reply_length() -> None:
    got = parse(SHAREGPT)
    assert len(got) == 2
    assert got[0].body["messages"] == [{"role": "user", "content": "Write a haiku about GPUs"}]
    reply = "Silicon rivers, forty watts of thought at rest, tokens fall like rain."
    assert got[0].output_tokens == -(-len(reply) // 4)
    assert (got[1].category, got[1].output_tokens) == ("chat", None)


def test_sharegpt_errors_name_the_line_of_the_bad_entry() -> None:
    bad = SHAREGPT.replace('{"from": "human", "value": "Hello"}', '{"from": "human", "value": 7}')
    with pytest.raises(InvalidInput, match=r"^line 6: turn 0 must be an object with a 'value' string"):
        parse(bad)
    broken = SHAREGPT.replace('"id": "b",', '"id": "b"')
    with pytest.raises(InvalidInput, match=r"^line 5: not JSON"):
        parse(broken)
    with pytest.raises(InvalidInput, match=r"^line 4: expected ',' or ']'"):
        parse('[\n  {"conversations": []}\n\n  {"conversations": []}\n]')


def test_replayable_reduces_a_request_to_prompt_and_sampling() -> None:
    endpoint, body = replayable(
        {"model": "m", "prompt": "x", "temperature": 0, "seed": 3, "logit_bias": {"1": 5}, "stream": True}
    )
    assert (endpoint, body) == ("completions", {"prompt": "x", "params": {"temperature": 0, "seed": 3}})
    assert endpoint_of("/capture/v1/chat/completions") == "chat"
    assert endpoint_of("/v1/embeddings") is None
    with pytest.raises(ValueError, match="'messages' must be a non-empty list"):
        replayable({"messages": []}, "chat")
    salted = salted_body(
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}, "ab"
    )
    assert salted["messages"][0]["content"] == "[ab] S"
