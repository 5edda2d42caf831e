"""The benchmark's metrics on recorded streams: vLLM- and SGLang-style chunks, with and without usage,
multi-token chunks, cut streams, failed requests; aggregates as `vllm bench serve` defines them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.measure.metrics import RequestRecord, Status, StreamReader, percentile, summarize


def _completion(text: str, usage: dict[str, int] | None = None, *, null_usage: bool = False) -> str:
    obj: dict[str, Any] = {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": text}]}
    if usage is not None:
        obj["usage"] = usage
    elif null_usage:
        obj["usage"] = None
    return json.dumps(obj)


def _chat(content: str | None, *, role: bool = False) -> str:
    delta = {"role": "assistant", "content": ""} if role else {"content": content}
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": None}], "usage": None})


def _usage(prompt: int, completion: int) -> str:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return json.dumps({"choices": [], "usage": usage})


def _play(events: list[tuple[float, str]], *, sent: float = 1.0, **finish: Any) -> RequestRecord:
    reader = StreamReader(RequestRecord(index=0, sent=sent))
    for at, data in events:
        reader.feed(data, at)
    return reader.finish(**finish)


def test_vllm_stream_with_final_usage() -> None:
    # vLLM omits usage on the token chunks; the last chunk (choices []) carries it.
    r = _play([(1.2, _completion("Hel")), (1.3, _completion("lo")), (1.5, _completion(" world")),
               (1.5, _usage(7, 5)), (1.5, "[DONE]")])  # fmt: skip
    assert r.ok
    assert r.tokens_from_usage
    assert (r.prompt_tokens, r.output_tokens) == (7, 5)
    assert r.ttft == pytest.approx(0.2)
    assert r.e2el == pytest.approx(0.5)
    assert r.gaps == pytest.approx([0.1, 0.2])
    assert r.chunk_tokens is None  # usage did not come per chunk: tokens per chunk are unknown
    s = summarize([r], duration=1.0)
    assert s["mean_tpot_ms"] == pytest.approx((0.5 - 0.2) / 4 * 1000)
    assert s["mean_itl_ms"] == pytest.approx(150.0)
    # ITL per token: the 4 tokens after the first spread evenly over the 2 gaps (2 per chunk), labelled.
    assert s["itl_per_token_split"] is True
    assert s["mean_itl_per_token_ms"] == pytest.approx(75.0)
    assert (s["total_output_tokens"], s["total_input_tokens"], s["completed"], s["failed"]) == (5, 7, 1, 0)


def test_sglang_chat_ignores_the_empty_role_chunk() -> None:
    # SGLang: a role chunk with empty content first, usage null on every chunk, then a usage chunk.
    r = _play([(1.05, _chat(None, role=True)), (1.4, _chat("Hi")), (1.6, _chat(" there")),
               (1.6, _usage(3, 2)), (1.6, "[DONE]")])  # fmt: skip
    assert r.ok
    assert r.ttft == pytest.approx(0.4)  # the first token, not the role chunk at 0.05
    assert r.gaps == pytest.approx([0.2])
    assert r.output_tokens == 2


def test_multi_token_chunks_with_continuous_usage() -> None:
    # Speculative decoding: one chunk carries several tokens; usage on every chunk says how many.
    r = _play([(1.1, _completion("a", {"prompt_tokens": 4, "completion_tokens": 1, "total_tokens": 5})),
               (1.3, _completion("bcd", {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8})),
               (1.4, _completion("ef", {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10})),
               (1.4, _usage(4, 6)), (1.4, "[DONE]")])  # fmt: skip
    assert r.chunk_tokens == [1, 3, 2]
    s = summarize([r], duration=0.4)
    # vLLM's ITL: one sample per chunk; per token: each gap divided among its chunk's tokens.
    assert s["mean_itl_ms"] == pytest.approx(150.0)
    assert s["itl_per_token_split"] is False
    samples = [0.2 / 3] * 3 + [0.1 / 2] * 2
    assert s["mean_itl_per_token_ms"] == pytest.approx(sum(samples) / 5 * 1000)
    assert s["mean_tpot_ms"] == pytest.approx(0.3 / 5 * 1000)
    assert s["output_throughput"] == pytest.approx(6 / 0.4)
    assert s["max_output_tokens_per_s"] == pytest.approx(6.0)


def test_without_usage_tokens_are_counted_from_chunks_and_labelled() -> None:
    r = _play(
        [(1.1, _completion("a", null_usage=True)), (1.2, _completion("b", null_usage=True)), (1.2, "[DONE]")]
    )
    assert r.ok
    assert not r.tokens_from_usage
    assert r.output_tokens == 2
    assert summarize([r], duration=1.0)["tokens_from_chunks"] == 1


def test_cut_stream_is_a_failure_that_still_counts() -> None:
    ok = _play([(1.1, _completion("a")), (1.2, _usage(1, 1)), (1.2, "[DONE]")])
    cut = _play([(1.1, _completion("a")), (1.2, _completion("b"))])  # the server went away: no [DONE]
    assert cut.status == Status.CUT
    assert "without [DONE]" in (cut.error or "")
    s = summarize([ok, cut], duration=2.0)
    assert (s["completed"], s["failed"]) == (1, 1)
    assert s["failures"] == {"cut": 1}
    assert s["total_output_tokens"] == 1  # only successful requests' tokens, as vLLM counts
    assert s["request_throughput"] == pytest.approx(0.5)  # the failed request's time still counts


def test_failed_and_timed_out_requests() -> None:
    http = _play([], status=Status.HTTP, error="HTTP 500: boom")
    timeout = _play([(1.1, _completion("a"))], status=Status.TIMEOUT, error="no end within 5s")
    err = _play([(1.1, json.dumps({"error": {"message": "context length exceeded"}}))])
    empty = _play([(1.1, _usage(3, 0)), (1.1, "[DONE]")])
    assert [r.status for r in (http, timeout, err, empty)] == [
        Status.HTTP,
        Status.TIMEOUT,
        Status.HTTP,
        Status.EMPTY,
    ]
    assert err.error == "context length exceeded"
    s = summarize([http, timeout, err, empty], duration=1.0)
    assert (s["completed"], s["failed"]) == (0, 4)
    assert s["mean_ttft_ms"] is None
    assert s["output_throughput"] == 0.0
    assert "HTTP 500: boom" in s["errors"]


def test_percentiles_match_numpy_linear() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([5.0], 99) == 5.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_aggregates_over_requests() -> None:
    recs = []
    for i, (ttft, e2el, n) in enumerate([(0.1, 1.1, 11), (0.2, 2.2, 21), (0.3, 0.3, 1)]):
        r = RequestRecord(index=i, sent=0.0, ttft=ttft, e2el=e2el, output_tokens=n, prompt_tokens=10)
        r.tokens_from_usage = True
        recs.append(r)
    s = summarize(recs, duration=4.0)
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["std_ttft_ms"] == pytest.approx((2 / 3) ** 0.5 * 100)  # population std, as numpy
    # TPOT only for n > 1, one value per request: (1.0/10, 2.0/20) -> 100 ms each.
    assert s["mean_tpot_ms"] == pytest.approx(100.0)
    assert s["mean_decode_tok_s"] == pytest.approx(10.0)
    assert s["total_token_throughput"] == pytest.approx((30 + 33) / 4.0)
    assert s["request_throughput"] == pytest.approx(0.75)


def test_a_chunk_without_text_after_the_first_token_is_an_itl_sample() -> None:
    # A token whose bytes do not complete a character comes as a chunk with empty text: vLLM counts the gap;
    # per token, its time goes to the token that completes the character.
    def u(n: int) -> dict[str, int]:
        return {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}

    r = _play([(1.1, _completion("a", u(1))), (1.2, _completion("", u(2))), (1.3, _completion("é", u(3))),
               (1.3, _usage(1, 3)), (1.3, "[DONE]")])  # fmt: skip
    assert r.gaps == pytest.approx([0.1, 0.1])
    assert r.chunk_tokens == [1, 1, 1]
    s = summarize([r], duration=1.0)
    assert s["mean_itl_ms"] == pytest.approx(100.0)
    assert s["mean_itl_per_token_ms"] == pytest.approx(100.0)
    assert s["mean_tpot_ms"] == pytest.approx(100.0)  # ITL and TPOT agree, as in vLLM's bench


def test_a_first_token_without_text_is_the_first_token() -> None:
    """vLLM streams a token whose bytes do not complete a character as a chunk with empty text; `vllm
    bench serve` takes TTFT at the first chunk with choices. Waiting for the first text (k25-ctl before
    #26) put the next token's arrival in TTFT: the mean TTFT's tail against vLLM's."""

    def u(n: int) -> dict[str, int]:
        return {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}

    with_usage = _play([(1.1, _completion("", u(1))), (1.3, _completion("é", u(2))), (1.3, "[DONE]")])
    assert with_usage.ttft == pytest.approx(0.1)
    assert with_usage.gaps == pytest.approx([0.2])
    without = _play([(1.1, _completion("")), (1.3, _completion("é")), (1.3, _usage(1, 2)), (1.3, "[DONE]")])
    assert without.ttft == pytest.approx(0.1)
    # SGLang's chat role chunk (usage null) is still not a token, nor a usage chunk that counts none yet.
    role = _play([(1.05, _chat(None, role=True)), (1.4, _chat("Hi")), (1.4, _usage(1, 1)), (1.4, "[DONE]")])
    assert role.ttft == pytest.approx(0.4)
    zero = _play([(1.05, _completion("", u(0))), (1.2, _completion("a", u(1))), (1.2, "[DONE]")])
    assert zero.ttft == pytest.approx(0.2)
