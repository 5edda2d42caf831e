"""Sweeps: derived profiles (validated as files are, refused naming the key), the acceptance-length
prediction from per-position rates (by hand, and against the fake engine's drafter), and the ranking."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from daemon.core.errors import InvalidInput
from daemon.core.profiles import LoadedProfile
from daemon.engines.checks import parse_checked_profile
from daemon.experiments.compare import Measured, predicted_lengths
from daemon.experiments.per_request import Samples
from daemon.experiments.sweep.ranking import parse_metric, sweep_result
from daemon.experiments.sweep.variants import Scalar, derive, parse_vary
from k25_sandbox.fake_stats import Draw, FakeConfig, Stats

STOCK = Path(__file__).resolve().parents[2] / "profiles"


def _base(tmp_path: Path, name: str, text: str) -> tuple[LoadedProfile, str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    lp = parse_checked_profile(path)
    assert isinstance(lp, LoadedProfile), lp
    return lp, text


def test_variants_are_the_product_of_the_axes_each_a_valid_profile(tmp_path: Path) -> None:
    lp, text = _base(tmp_path, "vllm-eagle3", (STOCK / "vllm-eagle3.toml").read_text())
    vary = parse_vary(["speculative.num_speculative_tokens=1,2,3", "max_num_seqs=64,256"])
    sweep = derive(lp, text, vary, max_variants=12)
    names = [v.name for v in sweep.variants]
    assert names[0] == "vllm-eagle3~num_speculative_tokens=1,max_num_seqs=64"
    # k=3 is the base's own value: with max_num_seqs it still differs, so 6 variants.
    assert len(names) == 6
    assert len({v.loaded.profile.unit for v in sweep.variants}) == 6
    assert all(v.loaded.profile.unit.startswith("k25-engine@vllm-eagle3.v") for v in sweep.variants)
    first = sweep.variants[0]
    assert '"num_speculative_tokens":1' in " ".join(first.argv)
    assert first.argv[-2:] == ["--max-num-seqs", "64"]
    assert first.loaded.profile.port == lp.profile.port
    assert "num_speculative_tokens = 1" in first.toml
    assert "unit" not in first.toml
    assert "vllm-eagle3" not in first.toml.split("[speculative]")[0].split("description")[0]


def test_a_variant_that_is_the_base_is_measured_once(tmp_path: Path) -> None:
    lp, text = _base(tmp_path, "vllm-eagle3", (STOCK / "vllm-eagle3.toml").read_text())
    sweep = derive(lp, text, {"speculative.num_speculative_tokens": [2, 3]}, max_variants=12)
    assert [v.name for v in sweep.variants] == ["vllm-eagle3~num_speculative_tokens=2"]
    assert sweep.notes == [
        "vllm-eagle3~num_speculative_tokens=3 runs exactly as vllm-eagle3: measured once, as vllm-eagle3"
    ]


FAKE = """engine = "vllm"
model = "/m"
port = 9001
command = ["python3", "-m", "fake", "--port", "{port}", "--spec-tokens", "3", "--acceptance", "0.6", "--park"]
"""


def test_flags_of_a_command_profile_are_replaced_in_place(tmp_path: Path) -> None:
    lp, text = _base(tmp_path, "fakey", FAKE)
    sweep = derive(lp, text, parse_vary(["spec-tokens=1,2", "--acceptance=0.3"]), max_variants=12)
    assert [v.name for v in sweep.variants] == [
        "fakey~spec-tokens=1,acceptance=0.3",
        "fakey~spec-tokens=2,acceptance=0.3",
    ]
    assert sweep.variants[1].argv == ["python3", "-m", "fake", "--port", "9001", "--spec-tokens", "2",
                                      "--acceptance", "0.3", "--park"]  # fmt: skip


@pytest.mark.parametrize(
    ("vary", "message"),
    [
        ({"max_num_sequences": [1]}, "unknown axis 'max_num_sequences': not a profile key, not a flag in"),
        ({"speculative.num_speculative_tokens": ["abc"]}, "key 'speculative.num_speculative_tokens'"),
        ({"speculative.num_speculative_tokens": [0]}, "greater than or equal to 1"),
        ({"max_num_seqs": ["many"]}, "axis 'max_num_seqs': value 'many' is not int"),
        ({"enforce_eager": [3]}, "axis 'enforce_eager': value '3' is not bool"),
        ({"port": [1, 2]}, "axis 'port': port cannot vary"),
        ({"speculative.nope": [1]}, "unknown axis 'speculative.nope'"),
        (
            {"max_num_seqs": [1, 2, 3, 4], "block_size": [8, 16, 32, 64]},
            "16 variants (4 x 4) exceed max_variants 12",
        ),
        ({"max_num_seqs": []}, "axis 'max_num_seqs' has no values"),
        ({"max_num_seqs": [8, 8]}, "lists a value twice"),
    ],
)
def test_bad_axes_are_refused_naming_the_key(
    tmp_path: Path, vary: dict[str, list[Scalar]], message: str
) -> None:
    lp, text = _base(tmp_path, "vllm-eagle3", (STOCK / "vllm-eagle3.toml").read_text())
    with pytest.raises(InvalidInput) as e:
        derive(lp, text, vary, max_variants=12)
    assert message in str(e.value)


def test_a_flag_missing_from_a_command_is_refused(tmp_path: Path) -> None:
    lp, text = _base(tmp_path, "fakey", FAKE)
    with pytest.raises(InvalidInput, match="not a flag in the profile's command"):
        derive(lp, text, {"max_num_seqs": [8]}, max_variants=12)


def test_parse_vary() -> None:
    assert parse_vary(["a.b=1,2.5,true,x"]) == {"a.b": [1, 2.5, True, "x"]}
    for bad in (["a"], ["=1"], ["a="], ["a=1", "a=2"]):
        with pytest.raises(InvalidInput):
            parse_vary(bad)


def test_predicted_lengths_by_hand() -> None:
    assert predicted_lengths([0.8, 0.5, 0.2]) == pytest.approx({1: 1.8, 2: 2.3, 3: 2.5})
    # The seed's operator: 15% acceptance at k=3 as vLLM reports it per position (0.30, 0.10, 0.05).
    assert predicted_lengths([0.30, 0.10, 0.05])[1] == pytest.approx(1.30)
    assert predicted_lengths([]) == {}


def _measured_length(k: int, rates: tuple[float, ...], steps: int = 400) -> tuple[float, list[float]]:
    cfg = FakeConfig("vllm", "m", rate=1.0, spec_tokens=k, acceptance=0.0, warmup_s=0.0, deadlock=False,
                     position_acceptance=rates)  # fmt: skip
    stats = Stats(cfg)
    emitted = sum(stats.step(room=100, draw=Draw(0.0)) for _ in range(steps))
    per_pos = [stats.per_pos.labels(**stats.labels, position=str(i))._value.get() / steps for i in range(k)]
    return emitted / steps, per_pos


def test_prediction_matches_the_fake_drafter_within_005() -> None:
    """One run at k=3 predicts k'=1, 2; the fake engine run at k'=1, 2 measures them (its drafter's
    per-position rates do not depend on k, as a chain drafter's do not)."""
    rates = (0.8, 0.5, 0.2)
    length3, per_pos = _measured_length(3, rates)
    assert length3 == pytest.approx(2.5, abs=0.02)
    predicted = predicted_lengths(per_pos)
    for k in (1, 2):
        measured, _ = _measured_length(k, rates)
        assert abs(predicted[k] - measured) < 0.05, (k, predicted[k], measured)


def _m(run_id: int, profile: str, thr: float, tpot: float) -> Measured:
    level = {"output_throughput": thr, "median_tpot_ms": tpot, "max_concurrency": 1}
    return Measured(run_id, profile, "s", "p", "g", 9, [level], {})


def test_ranking_marks_the_best_with_its_noise_band() -> None:
    request = {"profiles": ["b"], "axes": [{"label": "k"}],
               "variants": [{"name": "b~k=1", "values": {"k": 1}}, {"name": "b~k=2", "values": {"k": 2}}]}  # fmt: skip
    rows = [_m(1, "b", 100, 10), _m(2, "b", 102, 10), _m(3, "b~k=1", 130, 8), _m(4, "b~k=1", 128, 8.2),
            _m(5, "b~k=2", 90, 12), _m(6, "b~k=2", 91, 12)]  # fmt: skip
    r = sweep_result(9, request, rows, parse_metric(None))
    assert [x.profile for x in r.rows] == ["b", "b~k=1", "b~k=2"]
    assert r.best == "b~k=1"
    assert r.rows[1].verdict == "faster"
    assert r.rows[2].verdict == "slower"
    assert r.recommendation is not None
    assert r.recommendation.startswith("b~k=1: 1.28x b on output throughput (tok/s) at the first level")
    assert "noise band ±" in r.recommendation
    assert r.promote == "k25-ctl promote 9 'b~k=1'"
    tpot = sweep_result(9, request, rows, parse_metric("tpot_p50"))
    assert tpot.best == "b~k=1"  # lower is better
    assert tpot.rows[1].ratio == pytest.approx(10 / 8.1)
    with pytest.raises(InvalidInput, match="unknown metric 'speed'"):
        parse_metric("speed")
    assert parse_metric("throughput@8").concurrency == 8


def test_with_the_requests_a_variant_is_judged_from_them() -> None:
    """Per-request figures (#37): the variant's verdict and the recommendation carry the interval."""
    request = {"profiles": ["b"], "axes": [{"label": "k"}],
               "variants": [{"name": "b~k=1", "values": {"k": 1}}, {"name": "b~k=2", "values": {"k": 2}}]}  # fmt: skip
    rows = [_m(1, "b", 100, 10), _m(3, "b~k=1", 130, 8), _m(5, "b~k=2", 101, 12)]
    rng = np.random.default_rng(4)

    def requests(tok_s: float) -> Samples:
        seconds = list(64 / rng.normal(tok_s, 0.05 * tok_s, 40))
        return {"tokens": [64.0] * 40, "seconds": seconds, "tpot": [s / 63 for s in seconds]}

    samples = {1: requests(50), 3: requests(65), 5: requests(50.2)}
    r = sweep_result(9, request, rows, parse_metric(None), samples=samples)
    assert r.rows[1].verdict == "faster"
    assert re.fullmatch(r"faster: 1\.\d\dx \[1\.\d\d, 1\.\d\d\]", r.rows[1].verdict_text or "")
    assert r.recommendation == f"b~k=1 against b on {r.metric}: {r.rows[1].verdict_text}"
    assert (r.rows[2].verdict or "") == "no difference detected"  # 0.4% apart: under the 1% that counts
    tpot = sweep_result(9, request, rows, parse_metric("tpot_p50"), samples=samples)
    assert tpot.rows[1].verdict == "faster"  # lower is better


def test_a_prediction_is_shown_only_beside_a_variant_that_changes_nothing_but_k() -> None:
    def run(run_id: int, profile: str, rates: list[float]) -> Measured:
        level = {"output_throughput": 100.0, "acceptance_length": 1 + sum(rates),
                 "spec_decode_per_position_acceptance_rates": rates}  # fmt: skip
        return Measured(run_id, profile, "s", "p", "g", 9, [level], {})

    request = {"profiles": ["b"], "axes": [{"label": "k", "base": "3"}, {"label": "acc", "base": "0.6"}],
               "variants": [{"name": "b~k=1,acc=0.6", "values": {"k": 1, "acc": 0.6}},
                            {"name": "b~k=1,acc=0.8", "values": {"k": 1, "acc": 0.8}}]}  # fmt: skip
    rows = [run(1, "b", [0.8, 0.5, 0.2]), run(2, "b~k=1,acc=0.6", [0.79]), run(3, "b~k=1,acc=0.8", [0.9])]
    r = sweep_result(9, request, rows, parse_metric(None))
    by = {x.profile: x for x in r.rows}
    assert by["b~k=1,acc=0.6"].predicted_length == pytest.approx(1.8)
    assert by["b~k=1,acc=0.8"].predicted_length is None  # another drafter's acceptance: no prediction
    assert r.predicted == pytest.approx({1: 1.8, 2: 2.3})
