"""Benchmarks of engines: the streaming client, vLLM's metric definitions, prompts, the spec, the runner of
one benchmark, experiments over profiles, and the comparison verdict."""
