"""The capture sink, its counts, export and purge, and datasets through the API (real SQLite): the sink's
own token, what an anonymous read shows (counts, never text), imports with line-named errors, a captured
window replayed by a benchmark with its categories and provenance."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.api.conftest import Env, running_env, wait_run

CAPTURE = "capture-token-for-the-mirror"
MARK = "quokkafish"


@contextlib.asynccontextmanager
async def capturing(tmp_path: Path, **capture: object) -> AsyncIterator[Env]:
    token = tmp_path / "capture-token"
    token.write_text(CAPTURE + "\n")
    token.chmod(0o600)
    settings = {"enabled": True, "sample_rate": 1.0} | capture
    async with running_env(tmp_path, capture=settings) as env:
        yield env


async def _mirror(
    env: Env, body: Any, *, token: str = CAPTURE, chat: bool = False, category: str = "code"
) -> Any:
    path = "/capture/v1/chat/completions" if chat else "/capture/v1/completions"
    headers = {"Authorization": f"Bearer {token}", "X-K25-Category": category}
    return await env.client.post(path, content=json.dumps(body), headers=headers)


async def test_the_sink_takes_only_its_token_and_an_anonymous_read_shows_counts(tmp_path: Path) -> None:
    async with capturing(tmp_path, max_body_bytes=2000) as env:
        body = {"model": "m", "prompt": f"def {MARK}(): pass", "temperature": 0.3, "max_tokens": 8}
        assert (await env.client.post("/capture/v1/completions", json=body)).status_code == 403
        assert (await _mirror(env, body, token="token-of-someone-else")).status_code == 403
        admin = env.auth["Authorization"].removeprefix("Bearer ")
        assert (await _mirror(env, body, token=admin)).status_code == 403  # the admin's is not the sink's
        r = await _mirror(env, body)
        assert (r.status_code, r.json()) == (202, {"kept": True})
        big = await _mirror(env, body | {"prompt": "x" * 3000})
        assert big.status_code == 413
        chat = {"messages": [{"role": "user", "content": f"hello {MARK}"}], "top_p": 0.5}
        assert (await _mirror(env, chat, chat=True, category="chat")).status_code == 202
        assert (await _mirror(env, {"input": "x"})).status_code == 422

        async def written() -> Any:
            st = (await env.client.get("/capture")).json()
            return st if st["rows"] == 2 else None

        from tests.waiting import eventually

        st = await eventually(written, what="two rows written")
        assert st["categories"] == {"code": 1, "chat": 1}
        assert st["since_start"]["too_large"] == 1
        assert MARK not in json.dumps(st)
        assert (await env.client.get("/capture/export")).status_code == 401
        export = await env.client.get("/capture/export", headers=env.auth)
        rows = [json.loads(line) for line in export.text.splitlines()]
        assert [r.get("prompt") or r["messages"][0]["content"] for r in rows] == [
            f"def {MARK}(): pass",
            f"hello {MARK}",
        ]
        assert rows[0]["params"] == {"temperature": 0.3, "max_tokens": 8}

        made = await env.client.post("/datasets/from-capture", json={"name": "window"}, headers=env.auth)
        assert made.status_code == 201, made.text
        assert (made.json()["prompts"], made.json()["source"]) == (2, "capture")
        assert MARK not in (await env.client.get("/datasets")).text
        purged = await env.client.delete("/capture", headers=env.auth)
        assert purged.json() == {"deleted": 2}
        assert (await env.client.get("/capture")).json()["rows"] == 0
        assert (await env.client.get("/datasets/window")).json()["prompts"] == 2  # a copy stays


async def test_capture_off_the_sink_answers_404(env: Env) -> None:
    r = await env.client.post(
        "/capture/v1/completions", json={"prompt": MARK}, headers={"Authorization": "Bearer x"}
    )
    assert r.status_code == 404
    st = (await env.client.get("/capture")).json()
    assert (st["enabled"], st["rows"]) == (False, 0)


OPENAI = "\n".join(
    json.dumps(x)
    for x in (
        {"prompt": "def merge(a, b):", "output_tokens": 12, "category": "code", "temperature": 0.1},
        {"messages": [{"role": "user", "content": "Tell me about rivers"}], "category": "chat"},
        {"prompt": "Write a bash script that counts lines", "output_tokens": 9, "category": "code"},
    )
)
SHAREGPT = json.dumps(
    [{"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello! " * 10}]}]
)


async def _import(env: Env, name: str, data: str, fmt: str | None = None) -> Any:
    params = {"name": name} | ({"format": fmt} if fmt else {})
    return await env.client.post("/datasets", content=data.encode(), params=params, headers=env.auth)


async def test_imports_and_a_replay_with_categories(env: Env) -> None:
    assert (await _import(env, "mine", OPENAI)).status_code == 201
    shared = await _import(env, "chats", SHAREGPT)
    assert shared.status_code == 201, shared.text
    assert (shared.json()["source"], shared.json()["categories"]) == ("sharegpt", {"-": 1})
    bad = await _import(env, "bad", OPENAI + '\n{"prompt": "x", "temperature": "warm"}')
    assert bad.status_code == 422
    assert bad.json()["detail"] == "line 4: 'temperature' must be a number, not \"warm\""
    assert (await _import(env, "mine", OPENAI)).status_code == 409
    assert (await _import(env, "random", OPENAI)).status_code == 422
    assert [d["name"] for d in (await env.client.get("/datasets")).json()] == ["chats", "mine"]

    missing = await env.client.post("/benchmarks", json={"dataset": "nope"}, headers=env.auth)
    await env.client.post("/profiles/baseline/activate", params={"wait": True}, headers=env.auth)
    missing = await env.client.post("/benchmarks", json={"dataset": "nope"}, headers=env.auth)
    assert missing.status_code == 404
    assert (await env.client.get("/runs")).json()[0]["kind"] != "benchmark"  # refused before a run began
    spec = {"dataset": "mine", "num_prompts": 6, "concurrency": [2], "max_tokens": 10, "warmups": 0}
    r = await env.client.post("/benchmarks", json=spec, headers=env.auth)
    assert r.status_code == 202, r.text
    run = await wait_run(env, r.json()["run_id"])
    assert run["outcome"] == "ok", run
    b = (await env.client.get(f"/benchmarks/{run['id']}", params={"requests": True})).json()
    level = b["levels"][0]
    assert set(level["summary"]["categories"]) == {"code", "chat"}
    assert level["summary"]["categories"]["code"]["requests"] == 4
    outs = sorted(req["out"] for req in level["requests"])
    assert outs == [9, 9, 10, 10, 12, 12] or outs == [9, 9, 10, 10, 10, 10]  # own lengths, capped at 10
    assert b["provenance"]["dataset"] == "mine"
    assert "output_tokens" in b["provenance"]["output_lengths"]
    deleted = await env.client.delete("/datasets/mine", headers=env.auth)
    assert deleted.json() == {"name": "mine", "prompts": 3}
