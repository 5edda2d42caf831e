"""What the capture and dataset routes call: the sink (one mirrored request), the capture's counts, export
and purge, and the datasets service; answers as schemas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import asdict
from datetime import UTC, datetime

from daemon.api.capture_schemas import (
    CaptureCountsOut,
    CaptureOut,
    DatasetDeletedOut,
    FromCaptureIn,
    PurgedOut,
)
from daemon.capture.sink import CaptureSink, TooLarge
from daemon.datasets.formats import Format
from daemon.datasets.service import DatasetInfo, Datasets
from daemon.datasets.shapes import Endpoint
from daemon.store.capture import CaptureStore


class CaptureController:
    def __init__(self, *, sink: CaptureSink, store: CaptureStore) -> None:
        self.sink = sink
        self.store = store

    @property
    def category_header(self) -> str:
        return self.sink.settings.category_header

    @property
    def max_body_bytes(self) -> int:
        return self.sink.settings.max_body_bytes

    def check(self, path: str, authorization: str | None) -> Endpoint:
        return self.sink.check(path, authorization)

    def too_large(self) -> TooLarge:
        return self.sink.too_large()

    def keep(self, endpoint: Endpoint, category: str | None, raw: bytes) -> bool:
        return self.sink.keep(endpoint, category, raw)

    async def state(self) -> CaptureOut:
        st = await self.sink.state()
        t = st.totals
        return CaptureOut(
            enabled=st.enabled,
            token_configured=st.token_configured,
            sample_rate=st.sample_rate,
            max_rows=st.caps.max_rows,
            max_bytes=st.caps.max_bytes,
            retention_days=st.caps.retention_s / 86400.0,
            rows=t.rows,
            bytes=t.bytes,
            oldest=_at(t.oldest),
            newest=_at(t.newest),
            categories=dict(t.categories),
            pending=st.pending,
            since_start=CaptureCountsOut(**asdict(st.counts)),
        )

    async def export(self) -> AsyncIterator[bytes]:
        """Every captured request as JSON lines, a page at a time off the event loop."""
        after = 0
        while True:
            lines, after = await asyncio.to_thread(self.store.export_page, after)
            if not lines:
                return
            yield ("\n".join(lines) + "\n").encode()

    async def purge(self) -> PurgedOut:
        await self.sink.flush()  # what waits in memory goes too
        return PurgedOut(deleted=await asyncio.to_thread(self.store.purge))


class DatasetsController:
    def __init__(self, *, datasets: Datasets) -> None:
        self.datasets = datasets

    async def all(self) -> list[DatasetInfo]:
        return await self.datasets.all()

    async def get(self, name: str) -> DatasetInfo:
        return await self.datasets.get(name)

    async def import_file(self, name: str, data: bytes, fmt: Format | None) -> DatasetInfo:
        return await self.datasets.import_file(name, data, fmt)

    async def from_capture(self, req: FromCaptureIn) -> DatasetInfo:
        return await self.datasets.from_capture(req.name, req.since, req.until, req.only())

    async def delete(self, name: str) -> DatasetDeletedOut:
        return DatasetDeletedOut(name=name, prompts=await self.datasets.delete(name))


def _at(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)
