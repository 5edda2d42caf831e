"""Issue 53: latency SLOs and goodput, pure (daemon/measure/slo.py)."""

from __future__ import annotations

import pytest

from daemon.core.errors import InvalidInput
from daemon.measure.metrics import RequestRecord, Status, summarize
from daemon.measure.slo import Bound, Slo, good, judge, parse


def test_an_slo_is_read_with_each_bound_and_the_error_share() -> None:
    slo = parse("ttft_p95_ms=800, tpot_p95_ms=60,errors=0.5%")
    assert slo == Slo((Bound("ttft", "p95", 800.0), Bound("tpot", "p95", 60.0)), 0.005)
    assert slo.text() == "ttft_p95_ms=800,tpot_p95_ms=60,errors=0.5%"
    assert parse("e2el_median_ms=2000").bounds[0].key == "median_e2el_ms"
    for text, words in (
        ("ttft_p95_ms", "expected name=value"),
        ("ttft_p50_ms=5", "no such bound"),
        ("ttft_p95_ms=5,ttft_p99_ms=9", "ttft is bounded twice"),
        ("ttft_p95_ms=fast", "is not a number of milliseconds"),
        ("errors=lots", "is not a share"),
    ):
        with pytest.raises(InvalidInput, match=words):
            parse(text)


def _request(i: int, ttft: float, e2el: float, out: int, status: Status = Status.OK) -> RequestRecord:
    return RequestRecord(index=i, sent=0.0, status=status, output_tokens=out, ttft=ttft, e2el=e2el)


def test_goodput_counts_the_requests_that_met_every_bound_as_vllm_does() -> None:
    """TPOT per request is (E2E - TTFT) / (tokens - 1), 0 for one token; a failed request is never good."""
    slo = parse("ttft_p95_ms=500,tpot_p95_ms=50")
    records = [
        _request(0, 0.4, 0.4 + 9 * 0.04, 10),  # good
        _request(1, 0.6, 0.6 + 9 * 0.04, 10),  # TTFT 600 > 500
        _request(2, 0.1, 0.1 + 9 * 0.06, 10),  # TPOT 60 > 50
        _request(3, 0.2, 0.2, 1),  # one token: TPOT 0, good
        _request(4, 0.1, 0.2, 10, Status.HTTP),  # failed
    ]
    assert [good(r, slo) for r in records] == [True, False, False, True, False]
    summary = summarize(records, duration=2.0)
    out = judge(records, summary, slo)
    assert (out["good_requests"], out["request_goodput"]) == (2, 1.0)
    assert out["slo_met"] is False
    assert out["slo_missed"][0] == "p95_ttft_ms 570.0 > 500"  # the level's p95 TTFT (4 ok: 0.1-0.6 s)
    errors = judge(records, summary, parse("e2el_p99_ms=60000,errors=10%"))
    assert errors["slo_missed"] == ["errors 20.00% > 10.00%"]
