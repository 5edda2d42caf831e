"""Helpers of the web tests: an experiment to give the page data, and the page's console errors."""

from __future__ import annotations

from typing import Any

from tests.sandboxing import Api


def experiment(api: Api, profiles: list[str], *, max_tokens: int) -> None:
    """An experiment over `profiles` at concurrency 1 and 2 (two levels for the charts), from baseline."""
    api.activate("baseline")
    spec = {"concurrency": [1, 2], "num_prompts": 2, "max_tokens": max_tokens, "warmups": 0}
    r = api.client.post("/experiments", json={"profiles": profiles, "benchmark": spec})
    assert r.status_code == 202, r.text
    assert api.wait_run(r.json()["run_id"], within_s=180)["outcome"] == "ok"


def errors_of(page: Any) -> list[str]:
    """Console errors and uncaught exceptions of the page from now on (a CSP violation is one)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors
