"""Writes the daemon's OpenAPI schema to docs/reference/openapi.json, the REST reference the manual renders
(mkdocs, neoteroi's OAD). Run it after changing a route or a schema: tests/unit/test_docs.py fails while
the file differs from what the app declares. No daemon is started: the app is only built."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from daemon.api.app import create_api
from daemon.core.settings import Settings

TARGET = Path(__file__).resolve().parent.parent / "docs" / "reference" / "openapi.json"


@contextlib.asynccontextmanager
async def _unused(_app: FastAPI) -> AsyncIterator[None]:
    yield


def schema_text() -> str:
    app = create_api(Settings(), _unused)
    return json.dumps(app.openapi(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    TARGET.write_text(schema_text())
    sys.stdout.write(f"wrote {TARGET}\n")
