"""Engine knowledge, one module per engine; `engine_for` picks the module for a profile."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.engines import custom, sglang, vllm
from daemon.engines.base import Engine

if TYPE_CHECKING:
    from daemon.core.profiles import Profile

ENGINES: dict[str, Engine] = {e.name: e for e in (vllm.ENGINE, sglang.ENGINE, custom.ENGINE)}


def engine_for(profile: Profile) -> Engine:
    return ENGINES[profile.engine]


def all_process_titles() -> tuple[str, ...]:
    return tuple(t for e in ENGINES.values() for t in e.process_titles)


def all_front_end_titles() -> tuple[str, ...]:
    return tuple(t for e in ENGINES.values() for t in e.front_end_titles)


def all_shm_patterns() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for e in ENGINES.values() for p in e.shm_patterns))
