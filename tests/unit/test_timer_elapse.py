"""A timer's next run as systemd reports it: USEC_INFINITY ("never", what a timer holds until its start job
has run) is no next run, not a date 584,000 years away (datetime refused it: a schedule made on a busy
host answered 500)."""

from __future__ import annotations

from datetime import UTC, datetime

from daemon.host.timers import USEC_INFINITY, next_elapse


def test_infinity_and_zero_are_no_next_run_and_a_time_is_kept() -> None:
    assert next_elapse(USEC_INFINITY) == 0
    assert next_elapse(0) == 0
    now_us = int(datetime.now(UTC).timestamp() * 1e6)
    assert next_elapse(now_us) == now_us
