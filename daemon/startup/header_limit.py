"""A cap on a request's head (request line and headers), as every HTTP server has one (nginx: 4 buffers of
8 KiB; h11: 16 KiB): uvicorn's httptools protocol has none, and accepted a 1 MB header. The head is counted
as it arrives, before httptools buffers it whole; past the cap the answer is 431 and the connection closes."""

from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 32 * 1024  # nginx's default large_client_header_buffers: 4 x 8k
END_OF_HEAD = b"\r\n\r\n"
TOO_LARGE = b"request header fields too large"
LINGER_S = 2.0


class HeadLimitedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the head capped at MAX_HEAD_BYTES."""

    _head = 0  # bytes of the current request's head seen so far
    _in_head = True  # between requests or inside a head (not in a body)
    _tail = b""  # the last bytes seen, so a terminator split across two reads is found
    _refused = False  # answered 431: what still arrives is read and dropped until the close

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._in_head:
            seen = self._tail + data
            end = seen.find(END_OF_HEAD)
            self._head += len(data) if end < 0 else max(0, end + len(END_OF_HEAD) - len(self._tail))
            self._tail = seen[-(len(END_OF_HEAD) - 1) :]
            if self._head > MAX_HEAD_BYTES:
                self._refuse()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._in_head, self._head, self._tail = False, 0, b""
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True  # the next request on this connection starts a head
        super().on_message_complete()

    def eof_received(self) -> None:
        if self._refused:  # the client is done sending: the lingering close ends here
            self.transport.close()
            return
        super().eof_received()

    def _refuse(self) -> None:
        self.logger.warning("a request's head passed %d bytes: answered 431 and closed", MAX_HEAD_BYTES)
        head = [
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
            *(name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: " + str(len(TOO_LARGE)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + TOO_LARGE)
        # A lingering close, as nginx's: closing with the client's unread bytes in the socket would send a
        # reset that can destroy the answer before the client reads it. The rest is read and dropped until
        # the client closes its side, or for LINGER_S at most.
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)
