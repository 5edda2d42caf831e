"""An OpenAI-style streaming server that steps like a batched engine, and knows each request's true TTFT:
one clock ticks every STEP seconds; a request is prefilled at the first tick PREFILL seconds or more after
it arrived, and from then on every tick writes one token to every running stream at the same moment (as
an engine step emits a token for each request of its batch). The truth is server-side: the time from the
request's last byte read to its first token written, at GET /truth by "1:PROMPT" for requests that ask
for usage on every chunk (k25-ctl's) and "0:PROMPT" for the others (vllm bench serve's). Raw asyncio, chunked
HTTP/1.1 keep-alive, as perf/lean_streamer.py. `python perf/stepped_streamer.py PORT STEP PREFILL`"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perf.lean_streamer import read_request


def event(data: str) -> bytes:
    body = f"data: {data}\n\n".encode()
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


@dataclass
class Stream:
    writer: asyncio.StreamWriter
    prompt: str
    max_tokens: int
    usage_each: bool
    arrived: float
    produced: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


TRUTH: dict[str, float] = {}
RUNNING: list[Stream] = []


def chunk(s: Stream, last: bool) -> bytes:
    choice = {"index": 0, "text": " tok", "logprobs": None, "finish_reason": "length" if last else None}
    data: dict[str, object] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "tiny",
        "choices": [choice],
    }
    usage = {"prompt_tokens": 8, "completion_tokens": s.produced, "total_tokens": s.produced + 8}
    if s.usage_each:
        data["usage"] = usage
    out = event(json.dumps(data))
    if last:
        out += event(json.dumps({"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": usage}))
        out += event("[DONE]") + b"0\r\n\r\n"
    return out


async def ticker(step: float, prefill: float) -> None:
    began = time.monotonic()
    tick = 0
    while True:
        tick += 1
        await asyncio.sleep(max(0.0, began + tick * step - time.monotonic()))
        now = time.monotonic()
        for s in list(RUNNING):
            if s.produced == 0 and now - s.arrived < prefill:
                continue
            s.produced += 1
            last = s.produced >= s.max_tokens
            s.writer.write(chunk(s, last))
            if s.produced == 1:
                TRUTH[f"{int(s.usage_each)}:{s.prompt}"] = time.monotonic() - s.arrived
            if last:
                RUNNING.remove(s)
                s.done.set()


async def main(port: int, step: float, prefill: float) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, raw = await read_request(reader)
                arrived = time.monotonic()
                if head.startswith(b"GET /truth"):
                    body = json.dumps(TRUTH).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
                    continue
                if not head.startswith(b"POST /v1/completions"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")  # /health, /metrics
                    continue
                req = json.loads(raw)
                opts = req.get("stream_options") or {}
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                )
                s = Stream(writer, str(req["prompt"]), int(req.get("max_tokens") or 16),
                           bool(opts.get("continuous_usage_stats")), arrived)  # fmt: skip
                RUNNING.append(s)
                await s.done.wait()
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    asyncio.get_running_loop().create_task(ticker(step, prefill))
    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])))
