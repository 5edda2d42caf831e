"""The CLI's side of the REST API (httpx): requests, errors as exit codes, the SSE stream of a run."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

import httpx

from daemon.core.settings import Settings

# A JSON object of k25-ctl's REST API as the CLI reads it: the daemon's schemas are the contract, and the
# CLI may talk to a daemon of another version, so it reads only the keys it shows.
ApiJson = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def daemon_url(settings: Settings) -> str:
    if url := os.environ.get("K25_URL"):
        return url
    host = "127.0.0.1" if settings.bind_host in ("0.0.0.0", "::") else settings.bind_host  # noqa: S104
    return f"http://{host}:{settings.port}"


def read_token(settings: Settings) -> str | None:
    """The token file is readable by root only: as anyone else, mutating calls get 401."""
    try:
        return settings.token_path.read_text().strip() or None
    except OSError:
        return None


class Client:
    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=timeout)

    def _check(self, r: httpx.Response) -> Any:
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ApiError(r.status_code, str(detail))
        return r.json() if r.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self._check(self.http.get(path, params={k: v for k, v in params.items() if v is not None}))

    def post(self, path: str, body: Any = None, **params: Any) -> tuple[int, Any]:
        r = self.http.post(path, params={k: v for k, v in params.items() if v is not None}, json=body)
        return r.status_code, self._check(r)

    def delete(self, path: str) -> Any:
        return self._check(self.http.delete(path))

    def upload(self, path: str, data: bytes, **params: Any) -> Any:
        """A file as the request body (POST), e.g. a dataset to import."""
        r = self.http.post(
            path,
            params={k: v for k, v in params.items() if v is not None},
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        return self._check(r)

    def download(self, path: str, out: BinaryIO) -> int:
        """A streamed answer written to `out` as it comes; returns its lines."""
        lines = 0
        with self.http.stream("GET", path, timeout=httpx.Timeout(30.0, read=None)) as r:
            if r.status_code >= 400:
                r.read()
                self._check(r)
            for chunk in r.iter_bytes():
                out.write(chunk)
                lines += chunk.count(b"\n")
        return lines

    def events(self, path: str) -> Iterator[ApiJson]:
        """The data of each server-sent event, as it arrives."""
        with self.http.stream("GET", path, timeout=httpx.Timeout(30.0, read=None)) as r:
            if r.status_code >= 400:
                r.read()
                self._check(r)
            for line in r.iter_lines():
                if line.startswith("data:"):
                    yield json.loads(line.removeprefix("data:").strip())
