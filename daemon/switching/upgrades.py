"""An engine upgraded under a profile, noticed at the next switch to it: the run says which version it was
and is now (its known answer is then recorded anew: daemon/proving/known_answer.py)."""

from __future__ import annotations

import asyncio
import logging

from daemon.core.errors import StoreError
from daemon.core.run_types import Phase
from daemon.runs.recorder import RunRecorder

log = logging.getLogger("k25.switch")


async def notice_upgrade(recorder: RunRecorder, run_id: int, profile: str, version: str | None) -> None:
    """Say on the run when the profile's engine version differs from the one its last run recorded."""
    if version is None:
        return
    try:
        last = await asyncio.to_thread(recorder.store.last_engine_version, profile, run_id)
    except StoreError:
        return  # the run itself was written: only the comparison is lost
    if last is None or last[1] == version:
        return
    said = f"the engine changed since run {last[0]}: {last[1]} -> {version} (a new known answer is recorded)"
    log.info("run %d: %s: %s", run_id, profile, said)
    await recorder.event(run_id, Phase.CREATED, said)
