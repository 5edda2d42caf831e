"""Records of what already happened, held in memory while the runs database cannot take a write (a full
disk, a read-only file) and written, in their order, as soon as it can again. A switch that loses its
database mid-load goes on (the engine, the host state and the units stay in agreement); its events, its
end and the serving run after it are written later, by themselves, and nothing is lost unless the daemon
stops first (then its restart settles the run like any interrupted one)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from daemon.core.errors import StoreUnwritable
from daemon.core.hoststate import StateHub
from daemon.core.run_types import NewRun
from daemon.store.queries import Store

log = logging.getLogger("k25.runs")
T = TypeVar("T")
WARNING = "runs database cannot be written"  # the start of the /status warning while records are held


class HeldWrites:
    def __init__(self, store: Store, hub: StateHub, *, retry_s: float) -> None:
        self.store = store
        self.hub = hub
        self.retry_s = retry_s
        self._held: deque[tuple[str, Callable[[], object]]] = deque()
        self._last_id = 0  # the newest run id given out while holding
        self._why = ""
        self._task: asyncio.Task[None] | None = None

    @property
    def holding(self) -> int:
        return len(self._held)

    async def write(self, what: str, fn: Callable[[], T]) -> T | None:
        """`fn`'s result, or None when it is held (the database cannot be written, or older writes wait)."""
        if not self._held:
            try:
                return await asyncio.to_thread(fn)
            except StoreUnwritable as e:
                self._why = _cause(e)
                log.error("%s; holding records in memory until it can (first: %s)", e, what)
        self._hold(what, fn)
        return None

    async def create(self, new: NewRun) -> int:
        """A run that records what already happened (a serving run, an engine started by hand): its row is
        held if need be, under an id given out now."""
        if not self._held:
            try:
                return await asyncio.to_thread(self.store.create_run, new)
            except StoreUnwritable as e:
                self._why = _cause(e)
                log.error("%s; holding records in memory until it can (first: run %s)", e, new.kind)
        top = await asyncio.to_thread(self.store.max_run_id)  # reading works on a full disk
        run_id = self._last_id = max(self._last_id, top) + 1
        self._hold(
            f"run {run_id} ({new.kind} {new.profile or '-'})", lambda: self.store.create_run(new, run_id)
        )
        return run_id

    def refuse_if_holding(self) -> None:
        """A new action (a switch, a benchmark) waits until the held records are written: its run id could
        collide with one given out while holding, and its history would start with a gap."""
        if self._held:
            raise StoreUnwritable(f"{WARNING} ({len(self._held)} records held in memory): {self._why}")

    def _hold(self, what: str, fn: Callable[[], object]) -> None:
        self._held.append((what, fn))
        self._show()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())

    def _show(self) -> None:
        """The /status warning with the count held now; a state event only when it reads differently."""
        others = tuple(w for w in self.hub.status.warnings if not w.startswith(WARNING))
        mine = f"{WARNING} ({self._why}): {len(self._held)} records held in memory, written when it can"
        shown = (*others, mine) if self._held else others
        if shown != self.hub.status.warnings:
            self.hub.warnings(shown)

    async def _flush(self) -> None:
        written = 0
        while self._held:
            what, fn = self._held[0]
            try:
                await asyncio.to_thread(fn)
            except StoreUnwritable:
                self._show()  # the count that still waits (not an event per record written)
                # No event says the disk has room again: trying again after a pause is the only way.
                await asyncio.sleep(self.retry_s)
                continue
            except Exception:  # a record that can never be written must not hold back the others
                log.exception("held record %s could not be written; dropped", what)
            self._held.popleft()
            written += 1
        self._show()
        log.warning("runs database writable again: %d held records written", written)

    async def close(self) -> None:
        if self._held:
            log.error(
                "the daemon stops with %d records not written (%s): the next start settles their runs",
                len(self._held),
                self._why,
            )
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _cause(e: StoreUnwritable) -> str:
    """SQLite's own words (e.g. "database or disk is full"), without the wrappers around them."""
    return str(e).rsplit(") ", 1)[-1].removeprefix("the runs database cannot be written: ")
