"""The tests' one way to wait for a condition: poll it until it holds or a deadline passes (never a fixed
sleep standing in for the condition). `eventually` for async tests, `eventually_sync` for threads and the
sandbox's blocking client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T]], *, what: str, within_s: float = 10.0, every_s: float = 0.01
) -> T:
    """`check()`'s first truthy value; AssertionError naming `what` (and the last value) at the deadline."""
    deadline = time.monotonic() + within_s
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within_s}s (last: {value!r})")
        await asyncio.sleep(every_s)


def eventually_sync(
    check: Callable[[], T],
    *,
    what: str,
    within_s: float = 60.0,
    every_s: float = 0.2,
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    """The same for blocking code; exceptions of the `tolerate` types count as 'not yet' (a restarting
    daemon refuses connections)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            value: T | None = check()
        except tolerate:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {within_s}s (last: {value!r})")
        time.sleep(every_s)
