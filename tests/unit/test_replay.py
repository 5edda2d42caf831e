"""A dataset replayed: its prompts in order with their own parameters, lengths and arrivals; per category,
the streams' figures and acceptance from their chunks; and compare's verdict per category, which can say
the opposite of the whole."""

from __future__ import annotations

import pytest

from daemon.datasets.service import Replay, ReplayPrompt
from daemon.experiments.compare import Measured, compare
from daemon.measure.metrics import RequestRecord, by_category
from daemon.measure.prompts import replay_set
from daemon.measure.spec import BenchmarkSpec
from k25_sandbox.fake_stats import Draw, FakeConfig, topic_of


def _replay(mean: float | None = None) -> Replay:
    prompts = [
        ReplayPrompt("completions", {"prompt": "def f():", "params": {"max_tokens": 300}}, "code", None, 0.0),
        ReplayPrompt(
            "chat", {"messages": [{"role": "user", "content": "hi"}], "params": {}}, "chat", 12, 0.5
        ),
        ReplayPrompt("completions", {"prompt": "x", "params": {}}, None, None, 2.0),
    ]
    return Replay("prod", "abc123", "how", mean, prompts)


def test_a_replay_takes_each_prompts_own_length_capped_and_cycles_its_arrivals() -> None:
    spec = BenchmarkSpec.model_validate({"dataset": "prod", "num_prompts": 7, "max_tokens": 100, "pace": 2.0})
    s = replay_set(spec, _replay())
    assert [p.output_tokens for p in s.prompts] == [100, 12, 100, 100, 12, 100, 100]  # own, file's, spec's
    assert [p.offset_s for p in s.prompts] == [0.0, 0.5, 2.0, 3.0, 3.5, 5.0, 6.0]  # next cycle: +span+gap
    assert [p.category for p in s.prompts[:3]] == ["code", "chat", "-"]
    assert s.provenance["dataset_sha256"] == "abc123"
    assert s.provenance["ignore_eos"] is True  # a replay generates the chosen lengths
    with_mean = replay_set(spec, _replay(mean=40.4))
    assert [p.output_tokens for p in with_mean.prompts[:3]] == [
        40,
        12,
        40,
    ]  # the engine's mean over the window
    assert (
        with_mean.hash
        != replay_set(BenchmarkSpec.model_validate({"dataset": "prod", "num_prompts": 8}), _replay()).hash
    )


def test_pace_needs_a_dataset_with_arrivals() -> None:
    with pytest.raises(ValueError, match="pace replays"):
        BenchmarkSpec.model_validate({"pace": 1.0})
    unpaced = Replay(
        "file", "h", "how", None, [ReplayPrompt("completions", {"prompt": "p"}, None, None, None)]
    )
    with pytest.raises(ValueError, match="no arrival times"):
        replay_set(BenchmarkSpec.model_validate({"dataset": "file", "pace": 1.0}), unpaced)


def _rec(i: int, chunks: list[int], seconds: float) -> RequestRecord:
    n = sum(chunks)
    return RequestRecord(index=i, sent=0.0, ttft=0.05, e2el=seconds, output_tokens=n, chunk_tokens=chunks)


def test_per_category_figures_come_from_each_categorys_own_streams() -> None:
    records = [_rec(0, [1, 3, 3, 3, 2], 1.0), _rec(1, [1, 1, 1, 1, 1], 1.0), _rec(2, [1, 4, 2, 1], 2.0)]
    cats = by_category(records, ["code", "chat", "code"], drafts=3)
    code, chat = cats["code"], cats["chat"]
    assert (code["requests"], code["output_tokens"]) == (2, 20)
    assert code["stream_tok_s"] == pytest.approx(20 / 3.0)
    assert code["acceptance_length"] == pytest.approx(
        (3 + 3 + 3 + 4 + 2) / 5
    )  # first and last chunks left out
    assert code["acceptance_rate"] == pytest.approx((15 / 5 - 1) / 3)
    assert (chat["acceptance_length"], chat["acceptance_rate"]) == (1.0, 0.0)
    assert by_category(records, ["a", "a", "a"], drafts=None)["a"]["acceptance_rate"] is None


def _measured(profile: str, thr: float, code: float, chat: float, n: int = 20) -> Measured:
    cats = {
        "code": {"completed": n, "stream_tok_s": code, "acceptance_length": 3.1},
        "chat": {"completed": n, "stream_tok_s": chat, "acceptance_length": 1.3},
    }
    summary = {"output_throughput": thr, "max_concurrency": 4, "request_rate": "inf", "categories": cats}
    return Measured(1 if profile == "baseline" else 2, profile, "s", "p", "g", None, [summary], {})


def test_compare_judges_each_category_and_the_whole_apart() -> None:
    c = compare(
        [_measured("eagle", 66.0, 134.0, 56.0), _measured("baseline", 82.0, 82.0, 82.0)], baseline="baseline"
    )
    eagle = next(r for r in c.rows if r.profile == "eagle")
    assert eagle.verdict == "slower"
    assert (eagle.categories["code"].verdict, eagle.categories["chat"].verdict) == ("faster", "slower")
    assert eagle.per_category == "1.63x on code, 0.68x on chat"
    few = compare([_measured("eagle", 66.0, 134.0, 56.0, n=4), _measured("baseline", 82.0, 82.0, 82.0, n=4)],
                  baseline="baseline")  # fmt: skip
    assert {c.verdict for c in few.rows[1].categories.values()} == {"too few requests"}
    assert few.rows[1].per_category is None


def test_the_fake_drafter_accepts_by_topic() -> None:
    cfg = FakeConfig("vllm", "m", 80.0, 3, 0.15, 0.0, False, topic_acceptance={"code": 0.7, "chat": 0.1})
    assert topic_of("Write a Python function that merges intervals") == "code"
    assert topic_of("Summarise the trade-offs between latency and throughput") == "chat"
    assert cfg.acceptance_for("implement a bash script") == 0.7
    assert cfg.acceptance_for("tell me a story") == 0.1
    draw = Draw(0.7)
    assert sum(draw.accepted(3) for _ in range(100)) == pytest.approx(210, abs=1)
