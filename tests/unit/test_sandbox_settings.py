"""`k25-ctl sandbox up --set KEY=VALUE` (issue 55): a sandbox's daemon settings from the command line, and a
clear error for a pair that is not one, before anything boots."""

from __future__ import annotations

import pytest

from daemon.core.errors import InvalidInput
from k25_sandbox.cli import _settings


def test_settings_pairs_become_the_daemons_settings_and_bad_ones_are_named() -> None:
    assert _settings(["service_port=8000", " drain_grace_s = 2 "]) == {
        "service_port": "8000",
        "drain_grace_s": "2",
    }
    assert _settings([]) == {}
    with pytest.raises(InvalidInput, match="expected KEY=VALUE"):
        _settings(["drain_grace_s"])
    with pytest.raises(InvalidInput, match="no setting 'drain_grace'"):
        _settings(["drain_grace=2"])
