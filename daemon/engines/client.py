"""k25-ctl's HTTP client of an engine: its health answer (None while nothing listens) and the readiness
probe, one small streamed completion that must finish in time. /health alone never proves generation
works. `ProbeProgress` keeps what the probe got so far, so a timeout can say what hung."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Protocol

import httpx

from daemon.core.errors import K25Error
from daemon.core.jsontypes import ForeignJson, RequestBody
from daemon.core.profiles import Profile
from daemon.engines.answers import Answer, AnswerRequest, BadAnswer, parse_answer, request_body
from daemon.engines.base import Engine


class ProbeFailed(K25Error):
    pass


@dataclass
class ProbeProgress:
    health: int | None = None  # the last health answer; None: the port refused
    health_passed: bool = False
    chunks: int = 0  # content chunks of the probe completion received

    def what_hung(self) -> str:
        if not self.health_passed:
            if self.health is None:
                return "health never answered (nothing listening on the port)"
            return f"health answered HTTP {self.health} and never passed"
        if self.chunks == 0:
            return "health passed, but the probe generation did not start (no token received)"
        return f"the probe generation started and stalled after {self.chunks} chunk(s)"


class EnginePort(Protocol):
    async def health(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> int | None: ...
    async def scrape(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> dict[str, str]: ...
    async def generate(self, profile: Profile, engine: Engine, progress: ProbeProgress) -> int: ...
    async def call(
        self, profile: Profile, path: str, *, timeout_s: float, body: RequestBody | None = None
    ) -> int | None: ...
    async def answer(self, profile: Profile, engine: Engine, req: AnswerRequest) -> Answer: ...
    async def read_json(self, profile: Profile, path: str) -> ForeignJson | None: ...
    async def aclose(self) -> None: ...


# vLLM (VLLM_HTTP_TIMEOUT_KEEP_ALIVE) and SGLang (uvicorn's default) close a keep-alive connection idle for
# 5 s, and httpx keeps one for 5 s too: a call sent just as the engine closes it gets no answer at all (a
# wake read as "POST /wake_up answered nothing" and started cold). Idle connections go well before that.
IDLE_CONNECTION_S = 2.0


class Prober:
    def __init__(self, client: httpx.AsyncClient | None = None) -> None:
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(10.0, connect=2.0), limits=httpx.Limits(keepalive_expiry=IDLE_CONNECTION_S)
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def health(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> int | None:
        """The health path's status code; None when the port refuses (the engine is still loading)."""
        path = engine.health_path(profile) or "/health"
        try:
            r = await self._client.get(profile.base_url + path, timeout=timeout_s)
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            return None
        except httpx.TimeoutException:
            return 504
        return r.status_code

    async def call(
        self, profile: Profile, path: str, *, timeout_s: float, body: RequestBody | None = None
    ) -> int | None:
        """POST one of the engine's control endpoints (parking's); its status, None when it did not answer."""
        try:
            r = await self._client.post(profile.base_url + path, json=body or {}, timeout=timeout_s)
        except httpx.HTTPError:
            return None
        return r.status_code

    async def answer(self, profile: Profile, engine: Engine, req: AnswerRequest) -> Answer:
        """One known-answer request, whole; raises ProbeFailed when there is no answer to compare."""
        extras = dict(engine.answer_extras) | (engine.adapter_fields(req.adapter) if req.adapter else {})
        path, body = request_body(profile, req, extras)
        try:
            r = await self._client.post(profile.base_url + path, json=body, timeout=profile.probe_timeout_s)
            data = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as e:
            raise ProbeFailed(f"the known-answer {req.kind} request failed: {e!r}") from e
        if not isinstance(data, dict):
            said = " ".join(r.text.split())[:300]  # the engine's reason (a 400 says which field)
            raise ProbeFailed(f"the known-answer {req.kind} request answered HTTP {r.status_code}: {said}")
        try:
            return parse_answer(req, data)
        except BadAnswer as e:
            raise ProbeFailed(f"the known-answer {req.kind} request: {e}") from e

    async def read_json(self, profile: Profile, path: str) -> ForeignJson | None:
        """GET a JSON object from the engine (`/is_sleeping`); None when it did not answer one."""
        try:
            r = await self._client.get(profile.base_url + path, timeout=10.0)
            data = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    async def scrape(self, profile: Profile, engine: Engine, *, timeout_s: float = 5.0) -> dict[str, str]:
        """The bodies of the engine's scrape paths that answered 200 (none while it is down)."""

        async def one(path: str) -> tuple[str, str | None]:
            try:
                r = await self._client.get(profile.base_url + path, timeout=timeout_s)
            except httpx.HTTPError:
                return path, None
            return path, r.text if r.status_code == 200 else None

        answers = await asyncio.gather(*(one(p) for p in engine.scrape_paths(profile)))
        return {path: body for path, body in answers if body is not None}

    async def generate(self, profile: Profile, engine: Engine, progress: ProbeProgress) -> int:
        """Stream one small completion to its end, counting content chunks into `progress`; returns their
        number. Raises ProbeFailed."""
        path, body = engine.probe_request(profile)
        try:
            async with self._client.stream("POST", profile.base_url + path, json=body, timeout=None) as r:
                if r.status_code != 200:
                    raise ProbeFailed(f"probe completion answered HTTP {r.status_code}")
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line.removeprefix("data:").strip()
                    if data == "[DONE]":
                        if not progress.chunks:
                            raise ProbeFailed("probe completion ended without generating a token")
                        return progress.chunks
                    choices = json.loads(data).get("choices") or []
                    if any(c.get("text") or (c.get("delta") or {}).get("content") for c in choices):
                        progress.chunks += 1
        except httpx.HTTPError as e:
            raise ProbeFailed(f"probe completion failed: {e!r}") from e
        raise ProbeFailed("probe completion stream ended without [DONE]")
