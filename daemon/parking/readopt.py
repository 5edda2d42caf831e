"""After a daemon restart: is a recorded parked engine still the one that was parked, and still asleep?"""

from __future__ import annotations

from daemon.core.errors import K25Error
from daemon.core.hoststate import ParkedInfo
from daemon.core.profiles import LoadedProfile
from daemon.engines import engine_for
from daemon.engines.client import EnginePort
from daemon.host.systemd import SystemdPort
from daemon.parking.levels import at_level
from daemon.proving.sleep import says_sleeping


async def still_parked(
    info: ParkedInfo, lp: LoadedProfile | None, systemd: SystemdPort, prober: EnginePort
) -> str | None:
    """None when the engine may be readopted as parked: its profile is valid, its unit runs the same main
    process, and (where the engine can say) it still sleeps; else why not."""
    if lp is None:
        return "its profile is gone or invalid"
    try:
        st = await systemd.state(info.unit)
    except K25Error as e:
        return f"its unit cannot be read: {e}"
    if st.is_down or st.main_pid != info.main_pid:
        return f"{info.unit} is {st.active_state} with main PID {st.main_pid} (parked: {info.main_pid})"
    calls = engine_for(lp.profile).park_calls(at_level(lp.profile, info.level))
    return await says_sleeping(prober, lp.profile, calls, True) if calls is not None else None
