"""The fake engine's HTTP surface: /health with the flavor's semantics, /v1/models, streaming
/v1/completions and /v1/chat/completions at a set token rate, /metrics with the engine's real names and
spec-decode counters consistent with a set acceptance, and SGLang's /server_info."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable

from prometheus_client import generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from daemon.core.jsontypes import RequestBody
from daemon.engines import sglang as sg
from k25_sandbox import fake_install
from k25_sandbox.fake_answer import Weights, prompt_key, served, text_of, token_ids, whole_extras
from k25_sandbox.fake_park import FakePark, ParkControl
from k25_sandbox.fake_stats import FakeConfig, Stats, count_request


class _NoWorkers:
    def release(self) -> None:
        pass

    def resume(self) -> None:
        pass


KV_SHARE = 0.04  # of the KV cache, per running request


def build_app(
    cfg: FakeConfig, started: float, announce_ready: Callable[[], None], workers: ParkControl | None = None
) -> Starlette:
    server = _FakeServer(cfg, started, workers or _NoWorkers())
    routes = [
        Route("/health", server.health),
        Route("/v1/models", server.models),
        Route("/metrics", server.metrics),
        Route("/version", server.version),
        Route("/v1/completions", server.complete, methods=["POST"]),
        Route("/v1/chat/completions", server.complete, methods=["POST"]),
    ]
    if cfg.flavor == "sglang":
        routes += [
            Route(sg.SERVER_INFO_PATH, server.server_info),
            Route("/get_server_info", server.server_info),
            Route(sg.GENERATE_PATH, server.generate, methods=["POST"]),
        ]
    if server.park is not None:
        routes += server.park.routes()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async def warm_up() -> None:
            await asyncio.sleep(cfg.warmup_s)  # SGLang's warm-up generation before it says it is ready
            announce_ready()

        task = asyncio.get_running_loop().create_task(warm_up()) if cfg.flavor == "sglang" else None
        yield
        if task is not None:
            task.cancel()

    return Starlette(routes=routes, lifespan=lifespan)


class _FakeServer:
    """The engine's HTTP surface: health, models, metrics, version, server info, completions, parking."""

    def __init__(self, cfg: FakeConfig, started: float, workers: ParkControl) -> None:
        self.cfg = cfg
        self.started = started
        self.weights = Weights(
            salt=cfg.answer_salt, noise=cfg.logprob_noise, adapters=dict.fromkeys(cfg.adapters, True)
        )
        self.park = FakePark(cfg.park, workers, self.weights, self._lose_drafter) if cfg.park else None
        self.stats = Stats(cfg)
        self.hang = asyncio.Event()  # never set: the deadlock fault
        self.slots = asyncio.Semaphore(cfg.max_running) if cfg.max_running else None
        self.batch = 0  # requests running now: a decode step's time grows with them (cfg.batch_knee)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """A request waits for a running slot (the engine's scheduler), then runs: both gauges count it."""
        stats = self.stats
        stats.waiting.inc()
        try:
            if self.slots is not None:
                await self.slots.acquire()
        finally:
            stats.waiting.dec()
        stats.running.inc()
        stats.kv.inc(KV_SHARE)
        self.batch += 1
        try:
            yield
        finally:
            self.batch -= 1
            stats.running.dec()
            stats.kv.dec(KV_SHARE)
            if self.slots is not None:
                self.slots.release()

    async def health(self, _: Request) -> Response:
        warm = time.monotonic() - self.started >= self.cfg.warmup_s
        if self.cfg.flavor == "sglang" and not warm:
            return Response(status_code=503)
        return Response(status_code=200)

    async def models(self, _: Request) -> Response:
        model = {"id": self.cfg.model, "object": "model", "owned_by": "fake"}
        return JSONResponse({"object": "list", "data": [model]})

    async def metrics(self, _: Request) -> Response:
        return Response(generate_latest(self.stats.registry), media_type="text/plain; version=0.0.4")

    async def version(self, _: Request) -> Response:
        return JSONResponse({"version": fake_install.version_of(self.cfg.flavor)})

    async def server_info(self, _: Request) -> Response:
        stats = self.stats
        length = stats.tokens / stats.steps if stats.steps else None
        state = {
            "avg_spec_accept_length": length if self.cfg.spec_tokens else None,
            "last_gen_throughput": self.cfg.rate,
        }
        version = fake_install.version_of(self.cfg.flavor)
        return JSONResponse({"version": version, "internal_states": [state]})

    async def tokens(self, max_tokens: int, prompt: str) -> AsyncIterator[int]:
        cfg, stats = self.cfg, self.stats
        draw = cfg.draw_for(prompt)
        stats.started += 1
        if cfg.deadlock or (cfg.hang_after is not None and stats.started > cfg.hang_after):
            await self.hang.wait()
        produced, clock, began = 0, 0.0, time.monotonic()
        step_s = (1 + cfg.draft_cost * cfg.spec_tokens) / cfg.rate
        while produced < max_tokens:
            n = stats.step(max_tokens - produced, draw)
            # The simulated decode time of this step, paced against the request's start so that sleep
            # overshoot does not add up: the stream runs at `rate` tokens/s (or steps of step_s), slowed
            # by the batch it shares the step with.
            clock += (step_s if cfg.draft_cost else n / cfg.rate) * cfg.batch_factor(self.batch)
            await asyncio.sleep(max(0.0, began + clock - time.monotonic()))
            produced += n
            stats.gen.inc(n)
            yield n

    async def generate(self, request: Request) -> Response:
        """SGLang's native /generate, not streamed: the text and meta_info with the request's verify steps."""
        body = await request.json()
        params = body.get("sampling_params") or {}
        prompt, max_tokens = str(body.get("text") or ""), int(params.get("max_new_tokens") or 16)
        produced = steps = 0
        async with self.slot():
            async for n in self.tokens(max_tokens, prompt):
                produced, steps = produced + n, steps + 1
        count_request(self.stats, self.cfg)
        meta = {"id": f"gen-{uuid.uuid4().hex[:12]}", "prompt_tokens": max(1, len(prompt.split()))}
        meta |= {"completion_tokens": produced, "spec_verify_ct": steps, "finish_reason": {"type": "length"}}
        text = text_of(token_ids(self.weights, prompt_key({"prompt": prompt}), 0, produced))
        return JSONResponse({"text": text, "meta_info": meta})

    def _lose_drafter(self) -> None:
        self.cfg.acceptance = 0.0
        self.cfg.topic_acceptance = {}

    async def complete(self, request: Request) -> Response:
        if self.park is not None and self.park.sleeping:
            return JSONResponse({"error": "the engine is sleeping"}, status_code=503)
        if self.weights.failing:  # /health stays 200 (vllm#49237)
            return JSONResponse({"error": "EngineCore encountered an issue"}, status_code=500)
        req = _Completion(self, await request.json(), request.url.path.endswith("/chat/completions"))
        if req.body.get("stream"):
            return StreamingResponse(req.stream(), media_type="text/event-stream")
        return JSONResponse(await req.whole())


class _Completion:
    """One completion request, streamed (as the engines send their chunks) or whole."""

    def __init__(self, server: _FakeServer, body: RequestBody, chat: bool) -> None:
        self.server = server
        self.cfg = server.cfg
        self.stats = server.stats
        self.body = body
        self.chat = chat
        self.max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        prompt = body.get("prompt") or json.dumps(body.get("messages", ""))
        self.prompt = str(prompt)
        self.prompt_tokens = max(1, len(str(prompt).split()))
        self.key = prompt_key(body)  # the greedy answer depends on it (and on the adapter that serves it)
        adapter = str(body.get("lora_path") or body.get("model") or "")
        if server.weights.adapters.get(adapter):  # a lost adapter (False) answers as the base model
            self.key = f"lora {adapter}|{self.key}"
        self.stats.prompt.inc(self.prompt_tokens)
        self.rid = f"cmpl-{uuid.uuid4().hex[:12]}"
        self.obj = "chat.completion.chunk" if chat else "text_completion"
        self.options = body.get("stream_options") or {}

    def chunk(self, text: str | None, finish: str | None = None, role: bool = False) -> RequestBody:
        choice: RequestBody = {"index": 0, "finish_reason": finish}
        if self.chat:
            choice["delta"] = {"role": "assistant", "content": ""} if role else {"content": text or ""}
        else:
            choice["text"] = text or ""
        out: RequestBody = {
            "id": self.rid,
            "object": self.obj,
            "created": int(time.time()),
            "model": self.cfg.model,
        }
        out["choices"] = [choice]
        if self.cfg.flavor == "sglang":
            out["usage"] = None  # SGLang sends null on non-final chunks; vLLM omits the key
        return out

    def usage(self, n: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": n,
            "total_tokens": self.prompt_tokens + n,
        }

    async def stream(self) -> AsyncIterator[bytes]:
        stats = self.stats
        began = time.monotonic()
        try:
            if self.chat and self.cfg.flavor == "sglang":
                yield f"data: {json.dumps(self.chunk(None, role=True))}\n\n".encode()
            produced = 0
            async with self.server.slot():
                async for n, out in self._chunks(began):
                    produced = n
                    yield f"data: {json.dumps(out)}\n\n".encode()
            if self.options.get("include_usage"):
                final = {
                    "id": self.rid,
                    "object": self.obj,
                    "model": self.cfg.model,
                    "choices": [],
                    "usage": self.usage(produced),
                }
                yield f"data: {json.dumps(final)}\n\n".encode()
            yield b"data: [DONE]\n\n"
        finally:
            stats.e2e.observe(time.monotonic() - began)
            count_request(stats, self.cfg)

    async def _chunks(self, began: float) -> AsyncIterator[tuple[int, RequestBody]]:
        """Each decode step's chunk with the tokens produced so far (TTFT and ITL observed as they go)."""
        continuous = bool(self.options.get("include_usage") and self.options.get("continuous_usage_stats"))
        last, produced = began, 0
        async for n in self.server.tokens(self.max_tokens, self.prompt):
            now = time.monotonic()
            (self.stats.ttft if produced == 0 else self.stats.itl).observe(now - last)
            last = now
            produced += n
            text = text_of(token_ids(self.server.weights, self.key, produced - n, n))
            out = self.chunk(text, "length" if produced >= self.max_tokens else None)
            if continuous:  # usage on every chunk: the client learns each chunk's tokens
                out["usage"] = self.usage(produced)
            yield produced, out

    async def whole(self) -> RequestBody:
        produced = 0
        async with self.server.slot():
            async for n in self.server.tokens(self.max_tokens, self.prompt):
                produced += n
        count_request(self.stats, self.cfg)
        ids = token_ids(self.server.weights, self.key, 0, produced)
        text = text_of(ids)
        choice: RequestBody = {"index": 0, "finish_reason": "length"}
        choice |= whole_extras(self.body, ids, self.chat, self.cfg.flavor, self.server.weights, self.key)
        served(self.server.weights, self.key)
        choice |= {"message": {"role": "assistant", "content": text}} if self.chat else {"text": text}
        kind = "chat.completion" if self.chat else "text_completion"
        resp = {"id": self.rid, "object": kind, "model": self.cfg.model}
        return resp | {"choices": [choice], "usage": self.usage(produced)}
