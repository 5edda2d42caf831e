"""The CLI's exit code says how a run ended: a run read back (`k25-ctl run ID`) that crashed, failed, was
cancelled or interrupted exits 3; one that ended well exits 0. A one-route daemon on a real socket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.main import main
from daemon.core.run_types import Outcome
from tests.json_daemon import json_daemon

RUN = {"id": 5, "kind": "serving", "profile": "baseline", "from_profile": None, "events": [], "error": None}


@pytest.fixture
def daemon() -> Iterator[tuple[str, dict[str, str]]]:
    answer = {"outcome": "ok"}
    with json_daemon({"/runs/5": lambda: RUN | answer}) as url:
        yield url, answer


@pytest.mark.parametrize("outcome", list(Outcome))
def test_run_exits_3_for_every_outcome_that_did_not_end_well(
    daemon: tuple[str, dict[str, str]], outcome: Outcome, capsys: pytest.CaptureFixture[str]
) -> None:
    url, answer = daemon
    answer["outcome"] = outcome.value
    bad = {Outcome.FAILED, Outcome.CANCELLED, Outcome.INTERRUPTED, Outcome.CRASHED}
    assert main(["run", "5", "--url", url]) == (EXIT_FAILED if outcome in bad else EXIT_OK)
    assert f": {outcome.value}" in capsys.readouterr().out
