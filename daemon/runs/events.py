"""The steps of a switch as events of its run: phases, load progress, load stages."""

from __future__ import annotations

from daemon.core.run_types import Phase, Progress
from daemon.engines.engine_types import LogEvent
from daemon.runs.recorder import RunRecorder


class RunEvents:
    """A switch's steps (bring-up's and the drain's), recorded as events of its run."""

    def __init__(self, recorder: RunRecorder, run_id: int) -> None:
        self.recorder = recorder
        self.run_id = run_id
        self.stages: dict[str, float] = {}  # the engine's load stages, and a warm before the start

    async def phase(self, phase: Phase, detail: str, *, load_seconds: float | None = None) -> None:
        await self.recorder.event(self.run_id, phase, detail, load_seconds=load_seconds)

    async def stage(self, stage: str, seconds: float) -> None:
        self.stages[stage] = seconds
        await self.recorder.event(
            self.run_id, Phase.LOADING, f"load stage {stage}: {seconds:.1f}s", load_stages=self.stages
        )

    async def progress(self, ev: LogEvent) -> None:
        p = Progress(ev.percent or 0, ev.done or 0, ev.total or 0)
        await self.recorder.event(
            self.run_id, Phase.LOADING, f"{p.percent}% ({p.done}/{p.total})", progress=p
        )
