"""The fake engine's HTTP surface: /health with the flavor's semantics, /v1/models, streaming
/v1/completions and /v1/chat/completions at a set token rate, /metrics with the engine's real names and
spec-decode counters consistent with a set acceptance, and SGLang's /server_info."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from daemon.engines import sglang as sg
from daemon.engines import vllm as vl

FAKE_VERSION = "0.0.0+fake"


@dataclass
class FakeConfig:
    flavor: str  # vllm | sglang
    model: str
    rate: float  # output tokens per second
    spec_tokens: int  # 0: no speculative decoding
    acceptance: float  # per-draft-token acceptance (vLLM's definition)
    warmup_s: float
    deadlock: bool
    # Faults that strike while serving: after this many requests (the readiness probe is the first).
    crash_after: int | None = None  # the engine exits once that many requests have finished
    hang_after: int | None = None  # later requests never get a token; /health stays 200


def _counter(name: str) -> str:
    return name.removesuffix("_total")


class Stats:
    """Speculative decoding made deterministic: each step accepts k*acceptance tokens on average."""

    def __init__(self, cfg: FakeConfig) -> None:
        self.cfg = cfg
        self.carry = 0.0
        self.steps = 0
        self.tokens = 0
        self.started = 0  # requests that asked for tokens
        self.finished = 0
        self.registry = CollectorRegistry()
        r = self.registry
        if cfg.flavor == "vllm":
            labels = {"model_name": cfg.model, "engine": "0"}
            names = (vl.M_PROMPT, vl.M_GENERATION, vl.M_TTFT, vl.M_ITL, vl.M_E2E, vl.M_RUNNING)
        else:
            labels = {"model_name": cfg.model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
            names = (sg.M_PROMPT, sg.M_GENERATION, sg.M_TTFT, sg.M_ITL, sg.M_E2E, sg.M_RUNNING)
        self.labels = labels
        keys = list(labels)
        prompt, gen, ttft, itl, e2e, running = names
        self.prompt = Counter(_counter(prompt), "prompt tokens", keys, registry=r).labels(**labels)
        self.gen = Counter(_counter(gen), "generation tokens", keys, registry=r).labels(**labels)
        self.ttft = Histogram(ttft, "time to first token", keys, registry=r).labels(**labels)
        self.itl = Histogram(itl, "inter-token latency", keys, registry=r).labels(**labels)
        self.e2e = Histogram(e2e, "request latency", keys, registry=r).labels(**labels)
        self.running = Gauge(running, "running requests", keys, registry=r).labels(**labels)
        if cfg.flavor == "vllm":
            self.requests = Counter(
                _counter(vl.M_SUCCESS), "finished", [*keys, "finished_reason"], registry=r
            )
            self.drafts = Counter(_counter(vl.M_DRAFTS), "drafts", keys, registry=r).labels(**labels)
            self.draft_tokens = Counter(_counter(vl.M_DRAFT_TOKENS), "draft tokens", keys, registry=r).labels(
                **labels
            )
            self.accepted = Counter(_counter(vl.M_ACCEPTED), "accepted", keys, registry=r).labels(**labels)
            self.per_pos = Counter(
                _counter(vl.M_ACCEPTED_POS), "accepted per pos", [*keys, "position"], registry=r
            )
        else:
            self.requests = Counter(_counter(sg.M_REQUESTS), "requests", keys, registry=r)
            self.accept_len = Gauge(sg.M_ACCEPT_LENGTH, "accept length", keys, registry=r).labels(**labels)
            self.accept_rate = Gauge(sg.M_ACCEPT_RATE, "accept rate", keys, registry=r).labels(**labels)
            self.throughput = Gauge(sg.M_THROUGHPUT, "throughput", keys, registry=r).labels(**labels)

    def step(self, room: int) -> int:
        """One decode step: how many tokens it emits (1 + accepted drafts, at most `room`: the request's
        end). vLLM's counters count every accepted draft; SGLang's lifetime mean counts emitted tokens."""
        k = self.cfg.spec_tokens
        accepted = 0
        if k:
            self.carry += k * self.cfg.acceptance
            accepted = min(k, int(self.carry))
            self.carry -= accepted
            if self.cfg.flavor == "vllm":
                self.drafts.inc()
                self.draft_tokens.inc(k)
                self.accepted.inc(accepted)
                for pos in range(k):
                    self.per_pos.labels(**self.labels, position=str(pos)).inc(1 if pos < accepted else 0)
        self.steps += 1
        self.tokens += min(1 + accepted, room)
        if k and self.cfg.flavor == "sglang":
            length = self.tokens / self.steps
            self.accept_len.set(length)
            self.accept_rate.set(length / (k + 1))
        return min(1 + accepted, room)


def build_app(cfg: FakeConfig, started: float, announce_ready: Callable[[], None]) -> Starlette:
    stats = Stats(cfg)
    hang = asyncio.Event()  # never set: the deadlock fault

    async def health(_: Request) -> Response:
        warm = time.monotonic() - started >= cfg.warmup_s
        if cfg.flavor == "sglang" and not warm:
            return Response(status_code=503)
        return Response(status_code=200)

    async def models(_: Request) -> Response:
        return JSONResponse(
            {"object": "list", "data": [{"id": cfg.model, "object": "model", "owned_by": "fake"}]}
        )

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(stats.registry), media_type="text/plain; version=0.0.4")

    async def version(_: Request) -> Response:
        return JSONResponse({"version": FAKE_VERSION})

    async def server_info(_: Request) -> Response:
        length = stats.tokens / stats.steps if stats.steps else None
        state = {
            "avg_spec_accept_length": length if cfg.spec_tokens else None,
            "last_gen_throughput": cfg.rate,
        }
        return JSONResponse({"version": FAKE_VERSION, "internal_states": [state]})

    async def tokens(max_tokens: int) -> AsyncIterator[int]:
        stats.started += 1
        if cfg.deadlock or (cfg.hang_after is not None and stats.started > cfg.hang_after):
            await hang.wait()
        produced, began = 0, time.monotonic()
        while produced < max_tokens:
            n = stats.step(max_tokens - produced)
            # The simulated decode time of this step, paced against the request's start so that sleep
            # overshoot does not add up: the stream runs at `rate` tokens/s.
            await asyncio.sleep(max(0.0, began + (produced + n) / cfg.rate - time.monotonic()))
            produced += n
            stats.gen.inc(n)
            yield n

    async def complete(request: Request) -> Response:
        body: dict[str, Any] = await request.json()
        chat = request.url.path.endswith("/chat/completions")
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        prompt = body.get("prompt") or json.dumps(body.get("messages", ""))
        prompt_tokens = max(1, len(str(prompt).split()))
        stats.prompt.inc(prompt_tokens)
        rid = f"cmpl-{uuid.uuid4().hex[:12]}"
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None = None, role: bool = False) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"role": "assistant", "content": ""} if role else {"content": text or ""}
            else:
                choice["text"] = text or ""
            out: dict[str, Any] = {"id": rid, "object": obj, "created": int(time.time()), "model": cfg.model}
            out["choices"] = [choice]
            if cfg.flavor == "sglang":
                out["usage"] = None  # SGLang sends null on non-final chunks; vLLM omits the key
            return out

        def usage(n: int) -> dict[str, int]:
            return {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}

        options = body.get("stream_options") or {}
        continuous = bool(options.get("include_usage") and options.get("continuous_usage_stats"))

        async def stream() -> AsyncIterator[bytes]:
            began = last = time.monotonic()
            stats.running.inc()
            produced = 0
            try:
                if chat and cfg.flavor == "sglang":
                    yield f"data: {json.dumps(chunk(None, role=True))}\n\n".encode()
                async for n in tokens(max_tokens):
                    now = time.monotonic()
                    (stats.ttft if produced == 0 else stats.itl).observe(
                        now - (began if produced == 0 else last)
                    )
                    last = now
                    produced += n
                    finish = "length" if produced >= max_tokens else None
                    out = chunk(" tok" * n, finish)
                    if continuous:  # usage on every chunk: the client learns each chunk's tokens
                        out["usage"] = usage(produced)
                    yield f"data: {json.dumps(out)}\n\n".encode()
                if options.get("include_usage"):
                    final = {
                        "id": rid,
                        "object": obj,
                        "model": cfg.model,
                        "choices": [],
                        "usage": usage(produced),
                    }
                    yield f"data: {json.dumps(final)}\n\n".encode()
                yield b"data: [DONE]\n\n"
            finally:
                stats.running.dec()
                stats.e2e.observe(time.monotonic() - began)
                _count_request(stats, cfg)

        if body.get("stream"):
            return StreamingResponse(stream(), media_type="text/event-stream")
        produced = 0
        async for n in tokens(max_tokens):
            produced += n
        _count_request(stats, cfg)
        text = " tok" * produced
        choice = {"index": 0, "finish_reason": "length"}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        resp = {"id": rid, "object": "chat.completion" if chat else "text_completion", "model": cfg.model}
        return JSONResponse(resp | {"choices": [choice], "usage": usage(produced)})

    routes = [
        Route("/health", health),
        Route("/v1/models", models),
        Route("/metrics", metrics),
        Route("/version", version),
        Route("/v1/completions", complete, methods=["POST"]),
        Route("/v1/chat/completions", complete, methods=["POST"]),
    ]
    if cfg.flavor == "sglang":
        routes += [Route(sg.SERVER_INFO_PATH, server_info), Route("/get_server_info", server_info)]

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


def _count_request(stats: Stats, cfg: FakeConfig) -> None:
    if cfg.flavor == "vllm":
        stats.requests.labels(**stats.labels, finished_reason="length").inc()
    else:
        stats.requests.labels(**stats.labels).inc()
    stats.finished += 1
    if cfg.crash_after is not None and stats.finished >= cfg.crash_after:
        # The crash-after-ready fault: exit as a crashed engine does (the answer just sent gets out first).
        asyncio.get_running_loop().call_later(0.05, os._exit, 1)
