"""Answers kept while what they were read from is unchanged: the page and the CLI ask the same lists and
comparisons every few seconds, and over a year of history each read costs milliseconds to a fifth of a
second."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Kept(Generic[T]):
    """Answers by key, for one version of their source (a counter its store bumps on every change): a new
    version drops them all; at most `most` at once (each key another filter or limit)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._version: int | None = None
        self._answers: dict[Hashable, T] = {}

    async def get(self, version: int, key: Hashable, build: Callable[[], Awaitable[T]]) -> T:
        # `version` is read before the build: a change while it reads is seen by the next call.
        if version != self._version:
            self._answers, self._version = {}, version
        if (answer := self._answers.get(key)) is None:
            answer = await build()
            if len(self._answers) >= self.most:
                self._answers.clear()
            self._answers[key] = answer
        return answer
