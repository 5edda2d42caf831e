"""The engines' HTTP client (daemon/engines/client.py): its idle connections end before an engine's do."""

from __future__ import annotations

import uvicorn

from daemon.engines.client import IDLE_CONNECTION_S, Prober


async def test_idle_connections_are_dropped_before_the_engine_closes_them() -> None:
    # vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE and uvicorn's timeout_keep_alive (SGLang, the fake engine): 5 s.
    engine_keep_alive_s = uvicorn.Config(app="k25:app").timeout_keep_alive
    assert engine_keep_alive_s == 5
    prober = Prober()
    try:
        pool = prober._client._transport._pool  # type: ignore[attr-defined]  # httpcore's connection pool
        assert pool._keepalive_expiry == IDLE_CONNECTION_S
        assert IDLE_CONNECTION_S <= engine_keep_alive_s / 2
    finally:
        await prober.aclose()
