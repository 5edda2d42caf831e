"""Warming through the API, on real files: residency in GET /profiles, and warm = "always" re-warming a
profile whose weights left the page cache."""

from __future__ import annotations

import os
from typing import Any

from daemon.host.pagecache import evict, resident_bytes
from tests.api.conftest import Env, wait_run
from tests.waiting import eventually


async def _until(env: Env, check: Any, what: str) -> Any:
    return await eventually(check, what=what, within_s=20, every_s=0.02)


async def test_warm_always_keeps_the_weights_resident(env: Env) -> None:
    folder = env.settings.config_dir / "keep-model"
    folder.mkdir()
    shard = folder / "model-00001-of-00001.safetensors"
    shard.write_bytes(os.urandom(4 * 2**20))
    evict(shard)
    lines = ['engine = "vllm"', f'model = "{folder}"', "port = 9150", "tensor_parallel_size = 1", "gpus = [0]",
             'warm = "always"']  # fmt: skip
    (env.settings.profiles_path / "keep.toml").write_text("\n".join(lines) + "\n")
    assert (await env.client.post("/profiles/reload", headers=env.auth)).status_code == 200

    async def warmed() -> Any:
        runs = (await env.client.get("/runs", params={"profile": "keep"})).json()
        return next((r for r in runs if r["kind"] == "warm"), None)

    run = await wait_run(env, (await _until(env, warmed, "a warm run for keep"))["id"])
    assert run["outcome"] == "ok", run
    assert resident_bytes(shard).resident == shard.stat().st_size

    async def shown() -> Any:
        p = (await env.client.get("/profiles/keep")).json()
        return p if p["residency"] and p["residency"]["percent"] == 100.0 else None

    p = await _until(env, shown, "residency 100% in GET /profiles")
    assert (p["warm"], p["residency"]["files"], p["residency"]["bytes"]) == ("always", 1, 4 * 2**20)
    r = await env.client.post("/profiles/keep/warm", headers=env.auth)
    assert r.status_code in (202, 409)  # 409 only while the background one still runs
    assert (await env.client.post("/profiles/nope/warm", headers=env.auth)).status_code == 404
