"""Secrets never leave in reads: flags, environment names, free text."""

from __future__ import annotations

from daemon.core import redact


def test_argv_masks_secret_flags_in_both_forms() -> None:
    args = ["vllm", "serve", "/m", "--api-key", "sk-abcdef123456", "--port", "8000", "--hf-token=hf_secretvalue1",
            "--served-model-name", "kimi"]  # fmt: skip
    assert redact.argv(args) == ["vllm", "serve", "/m", "--api-key", "***", "--port", "8000", "--hf-token=***",
                                 "--served-model-name", "kimi"]  # fmt: skip


def test_env_masks_by_name() -> None:
    assert redact.env({"HF_TOKEN": "x", "OPENAI_API_KEY": "y", "DB_PASSWORD": "z", "CUDA_VISIBLE_DEVICES": "0,1"}) == {
        "HF_TOKEN": "***", "OPENAI_API_KEY": "***", "DB_PASSWORD": "***", "CUDA_VISIBLE_DEVICES": "0,1"}  # fmt: skip


def test_text_masks_flags_assignments_bearer_and_key_shapes() -> None:
    line = ("vllm serve /m --api-key sk-live-0123456789 HF_TOKEN=hf_abcdefghij Authorization: Bearer abcdefghijkl "
            "and a stray sk-proj-ABCDEFGHIJKLMN; --port 8000")  # fmt: skip
    out = redact.text(line)
    for secret in ("sk-live-0123456789", "hf_abcdefghij", "abcdefghijkl", "sk-proj-ABCDEFGHIJKLMN"):
        assert secret not in out
    assert "--port 8000" in out
    assert "--api-key ***" in out
    assert redact.text("Loading safetensors checkpoint shards: 37% Completed | 24/64") == (
        "Loading safetensors checkpoint shards: 37% Completed | 24/64"
    )


def test_token_counts_are_not_secrets() -> None:
    """Flags and variables that count tokens are tuning an operator must see (a sweep's axes), not secrets;
    a token still is."""
    args = ["vllm", "serve", "--max-num-batched-tokens", "8192", "--num-speculative-tokens", "3",
            "--spec-tokens=2", "--hf-token", "hf_abcdefghijk", "--token=abc"]  # fmt: skip
    assert redact.argv(args) == ["vllm", "serve", "--max-num-batched-tokens", "8192", "--num-speculative-tokens",
                                 "3", "--spec-tokens=2", "--hf-token", "***", "--token=***"]  # fmt: skip
    assert redact.env({"VLLM_MAX_TOKENS": "64", "HF_TOKEN": "x"}) == {
        "VLLM_MAX_TOKENS": "64",
        "HF_TOKEN": "***",
    }
    assert redact.text("started with --max-num-batched-tokens 8192 --token abc") == (
        "started with --max-num-batched-tokens 8192 --token ***"
    )
