"""Load stages from the engines' real lines: a real vLLM 0.32 CPU server's log, GPU vLLM's lines as
docs/engines.md quotes them, and SGLang's begin/end lines timed by the journal."""

from __future__ import annotations

from pathlib import Path

import pytest

from daemon.engines import sglang, vllm
from daemon.engines.load_stages import LoadStages


def test_a_real_vllm_log(fixtures: Path) -> None:
    stages = LoadStages(vllm.ENGINE)
    for i, line in enumerate((fixtures / "vllm-0.32-ngram-serve.log").read_text().splitlines()):
        stages.feed(line, float(i))
    # The CPU build prints its weights and its engine init; no "Model loading", no graphs: absent.
    assert stages.stages == {"weights": 0.01, "engine_init": 22.87}


def test_gpu_vllm_lines() -> None:
    stages = LoadStages(vllm.ENGINE)
    lines = [
        "(Worker_TP0 pid=9) INFO [default_loader.py:501] Loading weights took 1471.20 seconds",
        "(Worker_TP0 pid=9) INFO [gpu_model_runner.py:2000] Model loading took 68.1234 GiB and 1500.123456 seconds",
        "(Worker_TP0 pid=9) INFO [backends.py:215] torch.compile takes 85.2 s in total",
        "(Worker_TP0 pid=9) INFO [gpu_model_runner.py:3000] Graph capturing finished in 61 secs, took 1.2 GiB",
        "(EngineCore_DP0 pid=8) INFO [core.py:402] init engine (profile, create kv cache, warmup model) took 190.5 seconds",
        "(APIServer pid=7) INFO [api_server.py:1000] Starting vLLM API server 0 on http://127.0.0.1:8000",
    ]  # fmt: skip
    done = [stages.feed(line, 0.0) for line in lines]
    assert done == ["weights", "model_load", "compile", "graphs", "engine_init", None]
    assert stages.stages == {"weights": 1471.2, "model_load": 1500.123456, "compile": 85.2, "graphs": 61.0,
                             "engine_init": 190.5}  # fmt: skip


def test_sglang_begin_end_timed_by_the_journal() -> None:
    stages = LoadStages(sglang.ENGINE)
    assert stages.feed("Load weight begin. avail mem=139.50 GB", 100.0) is None
    assert (
        stages.feed("Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16", 122.5) == "weights"
    )
    assert stages.feed("Capture cuda graph end. Time elapsed: 12.34 s. mem usage=3.1 GB", 140.0) == "graphs"
    assert stages.stages == pytest.approx({"weights": 22.5, "graphs": 12.34})
    # An end without its begin (the follower started late) is not guessed.
    late = LoadStages(sglang.ENGINE)
    late.feed("Load weight end. type=DeepseekV3ForCausalLM", 5.0)
    assert late.stages == {}
