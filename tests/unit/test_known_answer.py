"""The known answer's requests and their reading: vLLM's token ids, logprob tokens, text without either,
and how two answers agree (where they first differ)."""

from __future__ import annotations

import math

import pytest

from daemon.core.profiles import Profile
from daemon.engines import ENGINES
from daemon.engines.answers import REQUESTS, Answer, AnswerKind, BadAnswer, parse_answer, request_body
from daemon.proving.agreement import agreement, first_difference

COMPLETION, CHAT, LONG = REQUESTS
PROFILE = Profile(
    name="p", engine="vllm", model="/m", served_model_name="kimi", port=8000, gpus=[0], tensor_parallel_size=1
)


def test_the_requests_are_greedy_seeded_whole_and_short() -> None:
    # 82 tok/s single stream (the seed's baseline): the whole check in about 0.4 s, one request at a time.
    assert sum(r.max_tokens for r in REQUESTS) <= 0.5 * 82
    path, body = request_body(PROFILE, COMPLETION, ENGINES["vllm"].answer_extras)
    assert path == "/v1/completions"
    assert body["temperature"] == 0
    assert body["seed"] == 0
    assert body["stream"] is False
    assert body["return_token_ids"] is True
    assert body["logprobs"] == 5  # the fingerprint: top-5 logprobs of every token
    assert body["model"] == "kimi"
    path, body = request_body(PROFILE, CHAT, ENGINES["sglang"].answer_extras)
    assert path == "/v1/chat/completions"
    assert "return_token_ids" not in body  # SGLang is not asked for vLLM's extension
    assert body["messages"] == [{"role": "user", "content": CHAT.prompt}]
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 5


def test_an_answer_is_read_as_token_ids_then_logprob_tokens_then_text() -> None:
    vllm = {"choices": [{"text": " Paris.", "token_ids": [12, 13], "logprobs": {"tokens": ["a", "b"]}}]}
    assert parse_answer(COMPLETION, vllm).tokens == ("12", "13")
    chat = {"choices": [{"message": {"content": "Red"}, "logprobs": {"content": [{"token": "Red"}]}}]}
    assert parse_answer(CHAT, chat) == Answer(
        AnswerKind.CHAT, CHAT.prompt, "Red", ("Red",), ((-math.inf, ()),)
    )
    plain = {"choices": [{"text": " Paris"}]}
    assert parse_answer(COMPLETION, plain).units() == tuple(" Paris")
    with pytest.raises(BadAnswer):
        parse_answer(COMPLETION, {"error": "asleep"})
    with pytest.raises(BadAnswer):
        parse_answer(CHAT, {"choices": [{"text": "no message"}]})


def test_where_two_answers_first_differ() -> None:
    a = Answer(AnswerKind.COMPLETION, "p", " a b c", ("1", "2", "3"))
    assert first_difference(a, a) is None
    assert first_difference(a, Answer(AnswerKind.COMPLETION, "p", " a x c", ("1", "9", "3"))) == 1
    assert first_difference(a, Answer(AnswerKind.COMPLETION, "p", " a b", ("1", "2"))) == 2  # shorter
    # Without tokens on either side the text is compared character by character.
    assert first_difference(a, Answer(AnswerKind.COMPLETION, "p", " a b d")) == 5
    assert Answer.from_json(a.as_json()) == a


def test_agreement_request_by_request() -> None:
    base = (
        Answer(AnswerKind.COMPLETION, "p", " a b", ("1", "2")),
        Answer(AnswerKind.CHAT, "q", " c", ("3",)),
    )
    same = agreement("baseline", base, base)
    assert same is not None
    assert same.equal
    assert not same.from_first_token
    assert same.describe() == "vs baseline: completion: equal; chat: equal"
    later = (Answer(AnswerKind.COMPLETION, "p", " a z", ("1", "7")), base[1])
    half = agreement("baseline", later, base)
    assert half is not None
    assert not half.equal
    assert not half.from_first_token
    assert half.describe() == "vs baseline: completion: differs from token 1 of 2; chat: equal"
    wrong = tuple(Answer(a.kind, a.prompt, " !!", ("0",)) for a in base)
    bad = agreement("baseline", wrong, base)
    assert bad is not None
    assert bad.from_first_token
    other_prompt = (Answer(AnswerKind.CHAT, "another", " c", ("3",)),)
    assert agreement("baseline", other_prompt, base) is None  # nothing comparable


def test_vllm_ids_and_sglang_token_strings_are_compared_by_their_text() -> None:
    """vLLM answers token ids, SGLang token strings: the same answer from both agrees; another does not."""
    vllm = (Answer(AnswerKind.COMPLETION, "p", " Paris is", ("3681", "374")),)
    sglang = (Answer(AnswerKind.COMPLETION, "p", " Paris is", (" Paris", " is")),)
    same = agreement("baseline", sglang, vllm)
    assert same is not None
    assert same.equal
    assert same.describe() == "vs baseline: completion: equal"
    other = (Answer(AnswerKind.COMPLETION, "p", " Lyon is", (" Lyon", " is")),)
    differs = agreement("baseline", other, vllm)
    assert differs is not None
    assert differs.from_first_token
    assert first_difference(other[0], vllm[0]) == 0  # the character at 1, in token 0 (" Lyon")
    assert differs.describe() == "vs baseline: completion: differs from token 0 of 2"
