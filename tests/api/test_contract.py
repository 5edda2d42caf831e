"""The contract of the operations whose answers depend on the host's state, with the token, under
schemathesis (every check) against the daemon with fake host ports: a schema-valid request is never
rejected as invalid (its refusals are the states the OpenAPI declares: 404 unknown, 409 busy or not
running), nothing answers 5xx, and every status and body is the one declared. Read-only probes of the
integer parameters that reach SQLite are in test_security (beyond int64: 422)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import uvicorn

from k25_sandbox.ports import free_port
from tests.api.conftest import TOKEN, running_env
from tests.waiting import eventually

ST = str(Path(sys.executable).parent / "st")
PATHS = r"^/(experiments|plans|runs/\{run_id\}/cancel|runs)$"


async def test_state_dependent_answers_are_declared_and_valid_requests_accepted(tmp_path: Path) -> None:
    async with running_env(tmp_path) as env:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(env.app, host="127.0.0.1", port=port, lifespan="off",
                                               log_level="warning"))  # fmt: skip
        serving = asyncio.create_task(server.serve())
        try:
            await eventually(lambda: _now(server.started), what="the daemon serves")
            st = await asyncio.create_subprocess_exec(
                ST, "run", f"http://127.0.0.1:{port}/openapi.json", "--checks", "all", "--max-examples", "25",
                "--include-path-regex", PATHS, "--header", f"Authorization: Bearer {TOKEN}",
                "--header", "Host: k25", "--generation-deterministic", "--no-color", "--request-timeout", "20",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            out = (await asyncio.wait_for(st.communicate(), 600))[0].decode()
        finally:
            server.should_exit = True
            await serving
    print(out[-3000:])
    assert st.returncode == 0, out[-8000:]
    assert "4 selected" in out or "selected" in out


async def _now(value: bool) -> bool:
    return value
