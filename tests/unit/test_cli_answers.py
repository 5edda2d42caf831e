"""The CLI shows the known answers: `k25-ctl compare` the agreement with the comparison's baseline, and
`k25-ctl profiles` each profile's answer, its age and run, and its agreement with the default profile."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from daemon.cli.main import main
from tests.json_daemon import json_daemon

AGREEMENT = {
    "profile": "vllm-eagle3", "other": "baseline", "equal": False, "from_first_token": False,
    "requests": [{"kind": "completion", "first_difference": 7, "length": 20}],
    "text": "vs baseline: completion: differs from token 7 of 20; chat: equal",
}  # fmt: skip
COMPARE = {"baseline": "baseline", "spec_hash": None, "prompt_hash": None, "gpu_key": None, "metric": "m",
           "rows": [], "notes": [], "answers": [AGREEMENT]}  # fmt: skip
KNOWN = {"run_id": 12, "recorded_at": "2026-12-02T10:00:00+00:00", "age_s": 180.0, "agreement": AGREEMENT,
         "answers": [{"kind": "completion", "prompt": "The capital of France is", "text": " Paris. The", "tokens": 3}]}  # fmt: skip
PROFILES = [
    {"name": "vllm-eagle3", "valid": True, "engine": "vllm", "unit": "k25-engine@vllm-eagle3.service",
     "unit_state": {"active_state": "inactive"}, "residency": None, "warm": "off", "default": False,
     "parked": False, "known_answer": KNOWN},
]  # fmt: skip


@pytest.fixture
def daemon() -> Iterator[str]:
    with json_daemon({"/compare": lambda: COMPARE, "/profiles": lambda: PROFILES}) as url:
        yield url


def test_compare_and_profiles_show_the_known_answers(daemon: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--url", daemon]) == 0
    out = capsys.readouterr().out
    assert (
        "known answer of vllm-eagle3 vs baseline: completion: differs from token 7 of 20; chat: equal" in out
    )
    assert main(["profiles", "--url", daemon]) == 0
    out = capsys.readouterr().out
    assert (
        "    known answer 'Paris. The' (run 12, 3m ago); vs baseline: completion: differs from token 7" in out
    )
