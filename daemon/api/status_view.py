"""GET /status's body, built and serialized once per change of what it shows (the host's state, the GPU
and stray samples, the serving watch's newest scrape and unit states, the profiles): a read between two
changes costs a comparison and a copy of bytes, never a model validation and a JSON dump. The ETag lets a
poller ask "changed?" for a 304."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

from pydantic import BaseModel


class StatusView:
    def __init__(
        self, build: Callable[[], Awaitable[BaseModel]], marks: Callable[[], tuple[object, ...]]
    ) -> None:
        self._build = build
        self._marks = marks
        self._key: tuple[object, ...] | None = None
        self._body = b""
        self._etag = ""
        self._lock = asyncio.Lock()  # many readers after a change: one builds, the others get its bytes

    async def body(self) -> tuple[bytes, str]:
        """The serialized status and its ETag."""
        key = self._marks()
        if key == self._key:
            return self._body, self._etag
        async with self._lock:
            key = self._marks()
            if key != self._key:
                body = (await self._build()).model_dump_json().encode()
                self._key = key
                self._body = body
                self._etag = '"' + hashlib.blake2b(body, digest_size=8).hexdigest() + '"'
            return self._body, self._etag
