"""What a switch asks of the GPUs' health: may an engine start on these GPUs, what hardware event ended
an engine, and a holder the teardown could not kill (the health watch answers; OpenGate where none runs)."""

from __future__ import annotations

from typing import Protocol

from daemon.teardown.report import ProcessOutcome


class GpuGate(Protocol):
    def blocked(self, gpus: list[int]) -> str | None: ...
    async def cause(self, gpus: list[int], ended: float, wait_s: float = 0.0) -> str | None: ...
    async def stuck(self, run_id: int, holders: list[ProcessOutcome]) -> None: ...


class OpenGate:
    """No health watch: every GPU may take an engine; nothing is attributed."""

    def blocked(self, gpus: list[int]) -> str | None:
        return None

    async def cause(self, gpus: list[int], ended: float, wait_s: float = 0.0) -> str | None:
        return None

    async def stuck(self, run_id: int, holders: list[ProcessOutcome]) -> None:
        return None
