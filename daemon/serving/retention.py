"""Bounded history (the host sampler runs this hourly): metric rows compacted and aged, old runs gone."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from daemon.core.settings import Settings
from daemon.store.serving import ServingStore

log = logging.getLogger("k25.watch")


async def retention(store: ServingStore, settings: Settings) -> None:
    now = datetime.now(UTC)
    s = settings
    done = await asyncio.to_thread(
        store.compact,
        minutes_before=now - timedelta(hours=s.metrics_minute_retention_h),
        hours_before=now - timedelta(days=s.metrics_hour_retention_d),
    )
    pruned = await asyncio.to_thread(store.prune_runs, before=now - timedelta(days=s.runs_retention_days))
    if any(done) or pruned:
        log.info(
            "retention: %d minute rows compacted to hours, %d hour rows and %d old runs deleted",
            *done,
            pruned,
        )
