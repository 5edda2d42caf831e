"""Benchmarks: the OpenAI streaming client, its metrics (vLLM's definitions), prompt sets, load shapes."""
