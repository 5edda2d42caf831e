"""A minimal OpenAI-style streaming server for measuring the benchmark client alone: raw asyncio, chunked
HTTP/1.1 keep-alive, pre-rendered SSE events paced against each request's start (`rate` tokens/s per
stream, `per_chunk` tokens per event). Almost free per token, so what perf/client_accuracy.py measures at
high rates is the client. `python perf/lean_streamer.py PORT RATE PER_CHUNK`"""

from __future__ import annotations

import asyncio
import json
import sys
import time


def event(data: str) -> bytes:
    body = f"data: {data}\n\n".encode()
    return f"{len(body):x}\r\n".encode() + body + b"\r\n"


async def stream(writer: asyncio.StreamWriter, max_tokens: int, rate: float, per_chunk: int) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    began, produced = time.monotonic(), 0
    while produced < max_tokens:
        n = min(per_chunk, max_tokens - produced)
        produced += n
        usage = {"prompt_tokens": 1, "completion_tokens": produced, "total_tokens": produced + 1}
        choice = {"index": 0, "text": " tok" * n, "finish_reason": None}
        delay = began + produced / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        writer.write(event(json.dumps({"choices": [choice], "usage": usage})))
        await writer.drain()
    writer.write(event(json.dumps({"choices": [], "usage": usage})) + event("[DONE]") + b"0\r\n\r\n")
    await writer.drain()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request of a keep-alive connection: its head and its body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length) if length else b""


async def main(port: int, rate: float, per_chunk: int) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, raw = await read_request(reader)
                body = json.loads(raw) if raw else {}
                if head.startswith(b"GET /health"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    continue
                await stream(writer, int(body.get("max_tokens", 16)), rate, per_chunk)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])))
