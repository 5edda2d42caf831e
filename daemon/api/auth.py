"""Bearer-token auth: mutating calls always need it; reads only when configured. The token file must exist
and must not be readable by others."""

from __future__ import annotations

import hmac
import stat
from pathlib import Path

from fastapi import Request

from daemon.core.errors import K25Error


class Unauthorized(K25Error):
    status_code = 401


def load_token(path: Path) -> str:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise K25Error(f"token file {path} is missing: run install.sh (or create it, mode 0600)") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise K25Error(
            f"token file {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}): chmod 600 it"
        )
    token = path.read_text().strip()
    if not token:
        raise K25Error(f"token file {path} is empty")
    return token


def check(request: Request, token: str) -> None:
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise Unauthorized(
            "missing or wrong bearer token (Authorization: Bearer <token from the token file>)"
        )
