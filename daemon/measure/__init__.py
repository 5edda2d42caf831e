"""One profile measured: the streaming client, vLLM's metric definitions, prompt sets, the benchmark spec,
the runner and its levels, the host's own normal (relative throughput)."""
