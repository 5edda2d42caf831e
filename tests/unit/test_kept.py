"""Kept answers: built once per key and version, dropped when the version moves, bounded in number."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from daemon.core.kept import Kept


def test_an_answer_is_built_once_per_version_and_key_and_the_number_kept_is_bounded() -> None:
    built: list[str] = []

    async def reads() -> list[str]:
        kept = Kept[str](most=2)

        def build(key: str, version: int) -> Callable[[], Awaitable[str]]:
            async def run() -> str:
                built.append(f"{key}@{version}")
                return f"{key}@{version}"

            return run

        out = [await kept.get(1, "a", build("a", 1)), await kept.get(1, "a", build("a", 1))]
        out.append(await kept.get(2, "a", build("a", 2)))  # the source changed: built again
        out += [await kept.get(2, "b", build("b", 2)), await kept.get(2, "c", build("c", 2))]
        out.append(await kept.get(2, "b", build("b", 2)))  # a third key dropped the two kept
        return out

    assert asyncio.run(reads()) == ["a@1", "a@1", "a@2", "b@2", "c@2", "b@2"]
    assert built == ["a@1", "a@2", "b@2", "c@2", "b@2"]
