"""The capture sink: the balancer mirrors each production request here (nginx `mirror`), and the sink
keeps the sampled share of them: arrival time, endpoint, model, category (a header the balancer sets),
prompt or messages and sampling parameters; never a header, never a key. The answer is immediate (the
mirror's response is ignored, but nginx holds its subrequest until it comes): the rows wait in memory for
the writer, which stores whatever arrived while it wrote the previous batch. Nothing captured is logged."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from daemon.core.errors import AccessDenied, InvalidInput, K25Error, NotFound, StoreError
from daemon.core.settings import CaptureSettings
from daemon.datasets.shapes import Endpoint, endpoint_of, replayable
from daemon.store.capture import Caps, CaptureStore, NewCapture, Totals

log = logging.getLogger("k25.capture")
RETENTION_CHECK_S = 3600.0  # without traffic, the retention is still applied this often
FLUSH_S = 0.2  # a kept request is in the table this soon
BATCH = 1000  # or as soon as this many wait


class TooLarge(K25Error):
    status_code = 413


@dataclass
class Counts:
    """What the sink did since the daemon started (the table's own totals are in the store)."""

    received: int = 0
    sampled_out: int = 0
    kept: int = 0
    rejected: int = 0  # not a completion request
    too_large: int = 0
    dropped_pending: int = 0  # the writer was too far behind: not kept
    dropped_caps: int = 0  # stored, then removed by the caps or the retention
    write_errors: int = 0


@dataclass(frozen=True)
class CaptureState:
    enabled: bool
    token_configured: bool
    sample_rate: float
    caps: Caps
    counts: Counts
    totals: Totals
    pending: int


class CaptureSink:
    def __init__(
        self,
        *,
        settings: CaptureSettings,
        token: str | None,
        store: CaptureStore,
        clock: Callable[[], float] = time.time,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.token = token
        self.store = store
        self.clock = clock
        self.rng = rng
        self.caps = Caps(settings.max_rows, settings.max_bytes, settings.retention_days * 86400.0)
        self.counts = Counts()
        self.pending: list[NewCapture] = []
        self.writing = 0  # rows in the write under way
        self._wake = asyncio.Event()  # a row is pending
        self._full = asyncio.Event()  # a batch is pending
        self._writer: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def start(self) -> None:
        if self.enabled:
            self._writer = asyncio.get_running_loop().create_task(self._write_loop())
            log.info(
                "capture on: sample rate %g, at most %d requests / %d bytes for %g days%s",
                self.settings.sample_rate,
                self.caps.max_rows,
                self.caps.max_bytes,
                self.settings.retention_days,
                "" if self.token else "; no capture token: every mirrored request is refused",
            )

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
        if self.pending:  # what was accepted is not lost at a stop
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(self.store.add, self.pending, self.caps, self.clock())

    def check(self, path: str, authorization: str | None) -> Endpoint:
        """Before the body is read: capture off or no such path (NotFound), a wrong token (AccessDenied)."""
        if not self.enabled:
            raise NotFound("capture is off (capture.enabled = false)")
        self._authorize(authorization)
        endpoint = endpoint_of(path)
        if endpoint is None:
            raise NotFound(f"no capture endpoint {path}")
        self.counts.received += 1
        return endpoint

    def too_large(self) -> TooLarge:
        self.counts.too_large += 1
        return TooLarge(f"request body over capture.max_body_bytes ({self.settings.max_body_bytes})")

    def keep(self, endpoint: Endpoint, category: str | None, raw: bytes) -> bool:
        """The sampled share kept (pending for the writer); InvalidInput: not a completion request."""
        if self.rng() >= self.settings.sample_rate:
            self.counts.sampled_out += 1
            return False
        try:
            obj = json.loads(raw)
            _, body = replayable(obj, endpoint)
        except ValueError as e:  # json's errors are ValueErrors too
            self.counts.rejected += 1
            raise InvalidInput(f"not a {endpoint} request: {e}") from None
        if len(self.pending) >= self.settings.max_pending:
            self.counts.dropped_pending += 1
            return False
        model = obj.get("model")
        self.pending.append(
            NewCapture(
                at=self.clock(),
                endpoint=endpoint,
                model=model if isinstance(model, str) else None,
                category=_category(category),
                body=json.dumps(body, separators=(",", ":")),
            )
        )
        self.counts.kept += 1
        self._wake.set()
        if len(self.pending) >= BATCH:
            self._full.set()
        return True

    def _authorize(self, authorization: str | None) -> None:
        if self.token is None:
            raise AccessDenied("no capture token is configured (capture.token_file)")
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise AccessDenied("missing or wrong capture token")

    async def _write_loop(self) -> None:
        """Wait for a first row (or the hourly retention check), then gather rows for up to FLUSH_S (or
        until BATCH are pending) and write them in one transaction: a write per request cost the daemon
        more CPU than the requests themselves at 500 a second (perf/capture.py)."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RETENTION_CHECK_S):
                    await self._wake.wait()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FLUSH_S):
                    await self._full.wait()
            self._wake.clear()
            self._full.clear()
            await self.flush()

    async def flush(self) -> None:
        """Store what is pending (and apply the caps and the retention), BATCH rows a transaction: the WAL
        is checkpointed between them, so a flood never grows it by more than a batch."""
        while True:
            batch, self.pending = self.pending[:BATCH], self.pending[BATCH:]
            self.writing = len(batch)
            try:
                added = await asyncio.to_thread(self.store.add, batch, self.caps, self.clock())
            except StoreError as e:
                self.counts.write_errors += len(batch)
                log.error("capture: %d captured request(s) not stored: %s", len(batch), e)
                return
            finally:
                self.writing = 0
            self.counts.dropped_caps += added.dropped
            if not self.pending:
                return

    async def state(self) -> CaptureState:
        totals = await asyncio.to_thread(self.store.totals)
        return CaptureState(
            self.enabled,
            self.token is not None,
            self.settings.sample_rate,
            self.caps,
            self.counts,
            totals,
            len(self.pending) + self.writing,
        )


def _category(value: str | None) -> str | None:
    """The balancer's category header, kept when it is a plain short name (else: none)."""
    if not value:
        return None
    value = value.strip()
    ok = 0 < len(value) <= 32 and all(c.isalnum() or c in "_.-" for c in value)
    return value.lower() if ok else None
