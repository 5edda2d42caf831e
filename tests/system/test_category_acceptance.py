"""Acceptance per prompt category with its interval (issue 53), end to end in the sandbox: two fake engines
whose drafters accept 0.9 of 3 drafts on code and 0.1 on everything else, each request's drafts starting
where its prompt says (so requests differ). The vLLM fake reports acceptance
only in its counters (the categories are measured in windows of their own); the SGLang fake answers its
native /generate with each request's verify steps (meta_info.spec_verify_ct)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from k25_sandbox.fake_stats import Draw
from tests.sandboxing import Api, with_profiles

# 33 tokens: at acceptance 0.1 a request takes 25 or 26 steps as its drafts' start falls (half each), so the
# six requests of a category differ; at 32, 4 in 5 took 25 steps and all four categories came out alike in
# about one run of 55 (CI: an SGLang interval of zero width).
TOKENS = 33
SPEC = {
    "num_prompts": 24,
    "max_tokens": TOKENS,
    "warmups": 1,
    "concurrency": [4],
    "acceptance_by_category": True,
}
ACCEPTANCE = {"code": 0.9, "chat": 0.1, "math": 0.1, "reasoning": 0.1}  # the fake's topics: code, or chat


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    drafter = {"rate": 400.0, "spec": {"k": 3, "acceptance": 0.1}}
    args = ("--topic-acceptance", "code=0.9,chat=0.1", "--draft-cost", "0.1", "--draw-spread")
    profiles = {f"topics-{f}": drafter | {"flavor": f, "engine_args": args} for f in ("vllm", "sglang")}
    with with_profiles(tmp_path_factory.mktemp("acceptance-profiles"), profiles) as api:
        yield api


def _emitted(acceptance: float) -> float:
    """Tokens a step over requests of TOKENS (each one's last step cut short), their drafts starting
    anywhere (--draw-spread): the population's ratio, as the fake's own drafts give it."""
    tokens = steps = 0
    for start in range(1000):
        draw, produced = Draw(acceptance, start / 1000), 0
        while produced < TOKENS:
            produced += min(TOKENS - produced, 1 + draw.accepted(3))
            steps += 1
        tokens += produced
    return tokens / steps


def _measure(api: Api, profile: str) -> dict[str, Any]:
    api.activate(profile)
    r = api.client.post("/benchmarks", json=SPEC)
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    assert api.wait_run(run_id, within_s=180)["outcome"] == "ok"
    found: dict[str, Any] = api.client.get(f"/benchmarks/{run_id}").json()["levels"][0]["summary"]
    print(profile, found["category_acceptance"])
    return found["category_acceptance"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("flavor", "method"),
    [("vllm", "window(s) of this category alone"), ("sglang", "meta_info.spec_verify_ct")],
)
def test_each_category_has_its_acceptance_with_an_interval_and_says_how(
    api: Api, flavor: str, method: str
) -> None:
    found = _measure(api, f"topics-{flavor}")
    assert set(found) == set(ACCEPTANCE)
    for cat, acc in found.items():
        # vLLM's counters count every accepted draft (1 + 3a a step); SGLang's counts are emitted tokens.
        known = 1 + 3 * ACCEPTANCE[cat] if flavor == "vllm" else _emitted(ACCEPTANCE[cat])
        assert method in acc["method"], acc
        assert acc["units"] >= 2, acc
        assert abs(acc["acceptance_length"] - known) < 0.1, (cat, acc, known)
        assert acc["low"] - 0.05 <= known <= acc["high"] + 0.05, (cat, acc, known)
    assert found["code"]["low"] > found["chat"]["high"]  # the categories told apart
    assert any(acc["high"] - acc["low"] > 0.001 for acc in found.values())  # requests differ: a real interval
