"""What a switch drives (the engine units, their journals, the teardown, the engines' HTTP) and whom it
tells (the serving watch, the unit follower, the warm before a start), and how it fails."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

from daemon.core.errors import K25Error
from daemon.core.profiles import LoadedProfile, Profile
from daemon.core.run_types import Outcome
from daemon.engines.client import EnginePort
from daemon.health.gate import GpuGate, OpenGate
from daemon.host.journal import JournalPort
from daemon.host.systemd import SystemdPort
from daemon.runs.recorder import HostAfter
from daemon.teardown.execute import Teardown


class SwitchFailed(K25Error):
    def __init__(self, reason: str, excerpt: str = "", needs_reset: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.excerpt = excerpt
        self.needs_reset = needs_reset


@dataclass(frozen=True)
class SwitchHost:
    """What a switch drives: the engine units, their journals, the teardown, the engines' HTTP."""

    systemd: SystemdPort
    journal: JournalPort
    teardown: Teardown
    prober: EnginePort
    gpus: GpuGate = field(default_factory=OpenGate)  # the GPUs' health: no engine on a GPU that needs a reset


class ServingHooks(Protocol):
    """The serving watch: a serving run begins when a switch ends active, and ends when a switch starts."""

    async def begin(
        self, lp: LoadedProfile, *, parent: int | None, adopt_run: int | None = None, managed: bool = True
    ) -> int: ...
    async def end(self, outcome: Outcome, detail: str, *, host: HostAfter | None = None) -> int | None: ...
    def current(self) -> LoadedProfile | None: ...
    async def settled(self, name: str) -> None: ...


class UnitFollowing(Protocol):
    """The unit follower: every profile a switch can start has its unit followed (a crash is a crash)."""

    def follow_units(self) -> None: ...


WarmHook = Callable[[int, Profile, Callable[[str, float], Awaitable[None]]], Coroutine[Any, Any, None]]
