"""Talks to an engine over HTTP: its health answer (None while nothing listens) and the readiness probe,
one small streamed completion that must finish in time. /health alone never proves generation works."""

from __future__ import annotations

import json

import httpx

from daemon.engines import engine_for
from daemon.errors import K25Error
from daemon.profiles import Profile


class ProbeFailed(K25Error):
    pass


class Prober:
    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=2.0))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def health(self, profile: Profile) -> int | None:
        """The health path's status code; None when the port refuses (the engine is still loading)."""
        path = engine_for(profile).health_path(profile) or "/health"
        try:
            r = await self._client.get(profile.base_url + path, timeout=5.0)
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            return None
        except httpx.TimeoutException:
            return 504
        return r.status_code

    async def generate(self, profile: Profile) -> int:
        """Stream one small completion to its end; returns the content chunks seen. Raises ProbeFailed."""
        path, body = engine_for(profile).probe_request(profile)
        chunks = 0
        try:
            async with self._client.stream("POST", profile.base_url + path, json=body, timeout=None) as r:
                if r.status_code != 200:
                    raise ProbeFailed(f"probe completion answered HTTP {r.status_code}")
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line.removeprefix("data:").strip()
                    if data == "[DONE]":
                        if not chunks:
                            raise ProbeFailed("probe completion ended without generating a token")
                        return chunks
                    choices = json.loads(data).get("choices") or []
                    if any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices):
                        chunks += 1
        except httpx.HTTPError as e:
            raise ProbeFailed(f"probe completion failed: {e!r}") from e
        raise ProbeFailed("probe completion stream ended without [DONE]")
