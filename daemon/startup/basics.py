"""What the daemon's services are built from: the settings, the host's ports, the run recorder, the job
registry, the profiles' inventory and the switch's view of the host."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.core.settings import Settings
from daemon.runs.jobs import Jobs
from daemon.runs.recorder import RunRecorder
from daemon.startup.machine import HostPorts
from daemon.status.inventory import Inventory
from daemon.switching.contracts import SwitchHost


@dataclass(frozen=True)
class Basics:
    """What every service is built from (private to the builders of startup/: no service holds it)."""

    s: Settings
    host: HostPorts
    recorder: RunRecorder
    jobs: Jobs
    inventory: Inventory
    switch_host: SwitchHost
