"""Parsers over recorded-format fixtures (tests/fixtures: a real vLLM 0.32 log and scrape, and scrapes in
the engines' real formats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.core.profiles import Profile, SpeculativeConfig
from daemon.engines.base import ignore_patterns
from daemon.engines.engine_types import LogKind, Readiness
from daemon.engines.sglang import ENGINE as SGLANG
from daemon.engines.vllm import ENGINE as VLLM

SPEC3 = SpeculativeConfig(draft_model="/d", num_speculative_tokens=3)
VLLM_P = Profile(name="v", engine="vllm", model="/m", port=1, speculative=SPEC3)
SGL_P = Profile(
    name="s",
    engine="sglang",
    model="/m",
    port=2,
    speculative=SPEC3.model_copy(update={"num_draft_tokens": 4}),
)


def test_vllm_real_scrape_parses(fixtures: Path) -> None:
    snap = VLLM.parse_metrics((fixtures / "vllm-0.32-ngram.metrics.txt").read_text())
    assert snap.generation_tokens == 2243.0
    assert snap.prompt_tokens == 477.0
    assert (snap.spec_drafts, snap.spec_draft_tokens, snap.spec_accepted) == (57.0, 165.0, 78.0)
    assert snap.spec_accepted_per_pos == {0: 33.0, 1: 24.0, 2: 21.0}


def test_vllm_scrape_pair_with_15_percent_acceptance(fixtures: Path) -> None:
    before = VLLM.parse_metrics((fixtures / "vllm-0.32-ngram.metrics.txt").read_text())
    after = VLLM.parse_metrics((fixtures / "vllm-eagle3-after.metrics.txt").read_text())
    d = VLLM.usage_delta(VLLM_P, before, after)
    assert d.acceptance_rate == pytest.approx(0.15)
    assert d.normalized_rate == pytest.approx(0.15)
    assert d.acceptance_length == pytest.approx(1.45)
    assert d.per_position == pytest.approx([0.25, 0.13, 0.07])
    assert d.generation_tokens == 1450.0


def test_vllm_without_spec_counters_reports_no_acceptance() -> None:
    text = '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0"} 5.0\n'
    snap = VLLM.parse_metrics(text)
    d = VLLM.usage_delta(VLLM_P, snap, snap)
    assert d.acceptance_rate is None
    assert d.acceptance_length is None
    assert d.per_position == []


def test_sglang_pair_accept_length_from_server_info(fixtures: Path) -> None:
    b = SGLANG.parse_metrics((fixtures / "sglang-eagle3-before.metrics.txt").read_text())
    a = SGLANG.parse_metrics((fixtures / "sglang-eagle3-after.metrics.txt").read_text())
    info_b = json.loads((fixtures / "sglang-server-info-before.json").read_text())
    info_a = json.loads((fixtures / "sglang-server-info-after.json").read_text())
    from dataclasses import replace

    b = replace(b, server_accept_length=SGLANG.server_accept_length(info_b))
    a = replace(a, server_accept_length=SGLANG.server_accept_length(info_a))
    d = SGLANG.usage_delta(SGL_P, b, a)
    # 3000 tokens over 6000 - 5000 = 1000 verify steps.
    assert d.acceptance_length == pytest.approx(3.0)
    assert d.acceptance_rate == pytest.approx(3.0 / 4)  # SGLang's own: bonus token included
    assert d.normalized_rate == pytest.approx(2.0 / 3)  # vLLM's definition
    assert d.generation_tokens == 3000.0
    assert d.prompt_tokens == 1200.0


def test_sglang_pair_falls_back_to_the_gauge(fixtures: Path) -> None:
    b = SGLANG.parse_metrics((fixtures / "sglang-eagle3-before.metrics.txt").read_text())
    a = SGLANG.parse_metrics((fixtures / "sglang-eagle3-after.metrics.txt").read_text())
    assert a.spec_accept_length_gauge == 3.0
    assert a.spec_accept_rate_gauge == 0.75
    d = SGLANG.usage_delta(SGL_P, b, a)
    assert d.acceptance_length == pytest.approx(3.0)


PREFIXED_BAR = (
    "(EngineCore_DP0 pid=4242) Loading safetensors checkpoint shards:  37% Completed | 24/64 "
    "[09:15<15:45, 23.1s/it]"
)


def test_load_progress_line_with_prefix() -> None:
    ev = VLLM.classify_line(PREFIXED_BAR)
    assert ev is not None
    assert (ev.kind, ev.percent, ev.done, ev.total) == (LogKind.PROGRESS, 37, 24, 64)
    ev = SGLANG.classify_line(PREFIXED_BAR.split(") ", 1)[1])
    assert ev is not None
    assert (ev.percent, ev.done, ev.total) == (37, 24, 64)


def test_real_vllm_log_classification(fixtures: Path) -> None:
    events = [e for line in (fixtures / "vllm-0.32-ngram-serve.log").read_text().splitlines()
              if (e := VLLM.classify_line(line)) is not None]  # fmt: skip
    progress = [(e.percent, e.done, e.total) for e in events if e.kind is LogKind.PROGRESS]
    assert progress == [(0, 0, 1), (100, 1, 1)]
    assert any(e.kind is LogKind.READY and "Application startup complete." in e.line for e in events)
    # The real startup is healthy: its WARNING lines are not errors.
    assert [e.line for e in events if e.kind is LogKind.ERROR] == []


@pytest.mark.parametrize(
    "line",
    [
        "(Worker_TP3 pid=77) ERROR 11-30 07:34:02 [core.py:700] EngineCore failed to start.",
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "AttributeError: 'NoneType' object has no attribute 'shape'",
        "SyntaxError: invalid syntax",
        "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error",
    ],
)
def test_error_lines(line: str) -> None:
    for engine in (VLLM, SGLANG):
        ev = engine.classify_line(line)
        assert ev is not None
        assert ev.kind is LogKind.ERROR


def test_profile_ignore_patterns_silence_known_noise() -> None:
    noise = "(Worker_TP0 pid=9) ERROR 11-30 07:34:02 [gpt_oss_triton_kernels_moe.py:30] Failed to import gpt_oss_triton"
    assert VLLM.classify_line(noise) is not None
    profile = VLLM_P.model_copy(update={"log_ignore": ["gpt_oss_triton"]})
    assert VLLM.classify_line(noise, ignore_patterns(profile)) is None
    # The ignore list only removes what it names.
    other = "(Worker_TP0 pid=9) ERROR 11-30 07:34:02 [core.py:1] boom"
    assert VLLM.classify_line(other, ignore_patterns(profile)) is not None


def test_ready_markers() -> None:
    assert SGLANG.classify_line("The server is fired up and ready to roll!").kind is LogKind.READY  # type: ignore[union-attr]
    line = "(APIServer pid=8348) INFO 11-30 07:34:26 [entry.py:140] Starting vLLM server on http://127.0.0.1:18000"
    assert VLLM.classify_line(line).kind is LogKind.READY  # type: ignore[union-attr]
    assert VLLM.classify_line("INFO:     Application startup complete.").kind is LogKind.READY  # type: ignore[union-attr]


def test_readiness_rules() -> None:
    assert VLLM.readiness(None) is Readiness.LOADING  # connection refused = still loading
    assert VLLM.readiness(200) is Readiness.HEALTHY
    assert VLLM.readiness(503) is Readiness.DEAD
    assert SGLANG.readiness(None) is Readiness.LOADING
    assert SGLANG.readiness(503) is Readiness.WARMING  # warm-up generation not done yet
    assert SGLANG.readiness(200) is Readiness.HEALTHY


def test_probe_is_a_small_streamed_completion() -> None:
    path, body = VLLM.probe_request(VLLM_P.model_copy(update={"served_model_name": "kimi"}))
    assert path == "/v1/completions"
    assert body["stream"] is True
    assert body["model"] == "kimi"
    assert body["max_tokens"] <= 8


def test_failure_excerpt_keeps_the_root_cause_before_the_tail() -> None:
    from daemon.engines.excerpt import failure_excerpt

    cause = "ValueError: Available memory on node 0 (0.5 GiB) is less than requested memory for kv (500 GiB)"
    tail = [f"noise {i}" for i in range(40)] + [cause, "RuntimeError: Engine core initialization failed."]
    errors = [cause, "RuntimeError: Engine core initialization failed."]
    text = failure_excerpt(errors, tail[-30:], limit=30).splitlines()
    assert text[0] == cause  # today's `[*errors, *tail][-30:]` pushed it out
    assert len(text) == 30
    assert text[-1] == "noise 39"
    assert failure_excerpt([], ["a", "b"], limit=1) == "b"
