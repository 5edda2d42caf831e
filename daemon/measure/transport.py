"""The benchmark client's transport: httpx over aiohttp (its C HTTP parser), set up as `vllm bench serve`
sets up its own session. Imported when a benchmark makes its client, not at the daemon's start."""

from __future__ import annotations

import time

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


class VllmLikeTransport(AiohttpTransport):
    """aiohttp set up as `vllm bench serve` sets up its own session, and each request stamped when it is
    handed to aiohttp: vLLM's TTFT counts from just before its `session.post`, and with it the look-ups a
    session that trusts the environment makes per request, off the event loop (~/.netrc, HTTP(S)_PROXY /
    NO_PROXY: two executor hops). Without them k25-ctl's TTFT came out 0.4-0.6 ms shorter than vLLM's on
    the same requests (found by measuring TTFT against `vllm bench serve`: perf/ttft_truth.py)."""

    def __init__(self, connections: int, stamp: str) -> None:
        self.stamp = stamp  # the request extension that holds when it was handed over (perf_counter)

        def session() -> aiohttp.ClientSession:  # made on first use, inside the running loop
            connector = aiohttp.TCPConnector(
                limit=connections, limit_per_host=connections, keepalive_timeout=60
            )
            return aiohttp.ClientSession(connector=connector, trust_env=True)

        super().__init__(client=session)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.extensions[self.stamp] = time.perf_counter()
        return await super().handle_async_request(request)
