"""The status line systemctl shows (sd_notify STATUS=), a drain included."""

from __future__ import annotations

from daemon.core.hoststate import StateHub, describe
from daemon.core.run_types import Phase


def test_the_status_line_follows_a_drain_and_the_end_of_the_switch() -> None:
    hub = StateHub()
    hub.settle(hub.status.state.ACTIVE, "baseline", None)
    hub.begin_switch(5, "alpha")
    hub.phase(Phase.DRAINING, None, "3 running, 1 waiting")
    assert describe(hub.status) == "switching to alpha: draining (3 running, 1 waiting)"
    hub.phase(Phase.STOP, None)
    assert describe(hub.status) == "switching to alpha: stop"
    st = hub.settle(hub.status.state.ACTIVE, "alpha", None)
    assert (st.phase, st.phase_detail, st.run_id) == (None, None, None)
    assert describe(st).startswith("active: alpha (ready ")
