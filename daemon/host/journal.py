"""A unit's journal through `journalctl -o json`: follow from now (or a cursor), read the last lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from daemon.core.jsontypes import ForeignJson


@dataclass(frozen=True)
class JournalRecord:
    unit: str
    message: str
    pid: int | None
    priority: int | None
    timestamp: float  # seconds since the epoch
    cursor: str


class JournalPort(Protocol):
    def follow(
        self, unit: str, *, after_cursor: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[JournalRecord]]: ...
    async def tail(self, unit: str, lines: int) -> list[JournalRecord]: ...
    async def cursor(self) -> str | None: ...


def parse_record(line: bytes | str, unit: str) -> JournalRecord | None:
    try:
        entry: ForeignJson = json.loads(line)
    except ValueError:
        return None
    message = entry.get("MESSAGE", "")
    if isinstance(message, list):  # journald's JSON form of a non-UTF-8 message
        message = bytes(message).decode("utf-8", "replace")

    def _int(key: str) -> int | None:
        v = entry.get(key)
        return int(v) if isinstance(v, str) and v.isdigit() else None

    return JournalRecord(
        unit=entry.get("_SYSTEMD_UNIT") or entry.get("UNIT") or unit,
        message=str(message),
        pid=_int("_PID"),
        priority=_int("PRIORITY"),
        timestamp=int(entry.get("__REALTIME_TIMESTAMP", "0")) / 1e6,
        cursor=entry.get("__CURSOR", ""),
    )


class JournalctlJournal:
    def __init__(self, command: Sequence[str] = ("journalctl",)) -> None:
        self._command = list(command)

    async def _run(self, *args: str) -> bytes:
        proc = await asyncio.create_subprocess_exec(
            *self._command,
            "--no-pager",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        out, _ = await proc.communicate()
        return out

    async def cursor(self) -> str | None:
        """The journal's current end: following after it means 'from now'."""
        out = await self._run("-n", "1", "-o", "json")
        rec = parse_record(out.strip() or b"{}", "")
        return rec.cursor or None if rec else None

    async def tail(self, unit: str, lines: int) -> list[JournalRecord]:
        out = await self._run("-u", unit, "-n", str(lines), "-o", "json")
        return [r for line in out.splitlines() if (r := parse_record(line, unit)) is not None]

    def follow(
        self, unit: str, *, after_cursor: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[JournalRecord]]:
        """Records of `unit` logged after `after_cursor` (default: now), until the context exits; the
        journalctl process never outlives the context."""
        return self._follow(["-u", unit], unit, after_cursor)

    def follow_kernel(self) -> AbstractAsyncContextManager[AsyncIterator[JournalRecord]]:
        """The kernel's messages from now on (SYSLOG_IDENTIFIER=kernel: what journald reads from /dev/kmsg;
        the driver's Xid lines are among them)."""
        return self._follow(["-t", "kernel"], "kernel", None)

    @asynccontextmanager
    async def _follow(
        self, match: list[str], unit: str, after_cursor: str | None
    ) -> AsyncIterator[AsyncIterator[JournalRecord]]:
        cursor = after_cursor if after_cursor is not None else await self.cursor()
        args = [*match, "-o", "json", "--follow"]
        args += ["--after-cursor", cursor] if cursor else ["--lines", "all"]
        proc = await asyncio.create_subprocess_exec(
            *self._command,
            "--no-pager",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            limit=1 << 20,
        )

        async def records() -> AsyncIterator[JournalRecord]:
            if proc.stdout is None:
                return
            while line := await proc.stdout.readline():
                if (rec := parse_record(line, unit)) is not None:
                    yield rec

        try:
            yield records()
        finally:
            if proc.returncode is None:
                proc.terminate()
            try:
                async with asyncio.timeout(5):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                with contextlib.suppress(ProcessLookupError):
                    await proc.wait()
