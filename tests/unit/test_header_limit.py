"""The daemon's HTTP server caps a request's head (issue 49: a 1 MB header was answered 200): the real
uvicorn configuration the daemon serves with (serve.uvicorn_config), on a loopback socket, spoken to in raw
HTTP. Past the cap: 431 and the connection closed; a large body, a head just under the cap, a head split
over many reads and a keep-alive connection's second request all pass."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
import uvicorn
from fastapi import FastAPI, Request

from daemon.startup.header_limit import MAX_HEAD_BYTES
from daemon.startup.serve import uvicorn_config
from tests.waiting import eventually_sync


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    app = FastAPI()

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"body": len(await request.body()), "headers": len(request.headers)}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn_config(app)
    config.lifespan = "off"
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually_sync(lambda: server.started, what="uvicorn started", within_s=20, every_s=0.01)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)


def _exchange(port: int, *parts: bytes) -> bytes:
    """Send the parts (one read each on the server, as far as TCP lets), read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small parts leave as they are written
        try:
            for part in parts:
                s.sendall(part)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed while we still sent: its answer is read below
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _post(headers: bytes, body: bytes = b"", *, close: bool = True) -> bytes:
    connection = b"connection: close\r\n" if close else b""
    return (
        b"POST /echo HTTP/1.1\r\nhost: x\r\n"
        + connection
        + headers
        + (b"content-length: %d\r\n\r\n" % len(body))
        + body
    )


def test_a_head_past_the_cap_is_431_and_closed(port: int) -> None:
    answer = _exchange(port, _post(b"x-big: " + b"a" * (1 << 20) + b"\r\n"))
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in answer
    many = b"".join(b"x-h%d: %s\r\n" % (i, b"b" * 100) for i in range(400))  # 40 KB in many headers
    assert _exchange(port, _post(many)).startswith(b"HTTP/1.1 431 ")


def test_what_fits_is_served(port: int) -> None:
    near = b"x-near: " + b"a" * (MAX_HEAD_BYTES - 200) + b"\r\n"
    assert _exchange(port, _post(near)).startswith(b"HTTP/1.1 200 ")
    body = b"z" * (1 << 20)  # a large body is not a head: sent with the head in one write
    answer = _exchange(port, _post(b"", body))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert b'"body":1048576' in answer
    request = _post(b"x-split: " + b"c" * 1000 + b"\r\n")
    assert _exchange(port, *(request[i : i + 7] for i in range(0, len(request), 7))).startswith(
        b"HTTP/1.1 200 "
    )


def test_each_request_of_a_connection_has_its_own_cap(port: int) -> None:
    half = b"x-half: " + b"d" * (MAX_HEAD_BYTES * 2 // 3) + b"\r\n"
    answer = _exchange(port, _post(half, b"1", close=False), _post(half, b"2"))
    assert answer.count(b"HTTP/1.1 200 ") == 2, answer[:300]
