"""The fake engine serves real traffic shapes: requests take time per token, and beyond --max-running they
wait, counted in the engine's own waiting gauge (vLLM's and SGLang's names), as the drain reads them."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from daemon.engines import sglang, vllm
from k25_sandbox.fake_http import build_app
from k25_sandbox.fake_stats import FakeConfig


@pytest.mark.parametrize("flavor", ["vllm", "sglang"])
async def test_requests_beyond_max_running_wait_and_are_counted(flavor: str) -> None:
    cfg = FakeConfig(flavor, "m", rate=100.0, spec_tokens=0, acceptance=0.0, warmup_s=0.0, deadlock=False,
                     max_running=1)  # fmt: skip
    app = build_app(cfg, time.monotonic(), lambda: None)
    engine = vllm if flavor == "vllm" else sglang
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://e") as c:
        body = {"model": "m", "prompt": "hi", "max_tokens": 30}  # 0.3 s each at 100 tokens/s
        calls = [asyncio.create_task(c.post("/v1/completions", json=body)) for _ in range(2)]

        async def gauges() -> tuple[float, float]:
            text = (await c.get("/metrics")).text
            return _gauge(text, engine.M_RUNNING), _gauge(text, engine.M_WAITING)

        seen = set()
        while not all(t.done() for t in calls):
            seen.add(await gauges())
            await asyncio.sleep(0.02)
        answers = [t.result() for t in calls]
        assert [len(a.json()["choices"][0]["text"].split()) for a in answers] == [30, 30]
        assert (1.0, 1.0) in seen  # one ran while the other waited for its slot
        assert await gauges() == (0.0, 0.0)


def _gauge(text: str, name: str) -> float:
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))
