"""An engine k25-ctl knows only through the profile: its `command`, `health_path` and `metrics_path`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from daemon.engines.base import Engine

if TYPE_CHECKING:
    from daemon.core.profiles import Profile


class CustomEngine(Engine):
    name = "custom"
    default_health_path = None
    default_metrics_path = None
    known_answer = False  # nothing says it speaks OpenAI's completions

    def render(self, profile: Profile) -> list[str]:
        # Profile validation guarantees a command for engine `custom`.
        return list(profile.command or [])

    def version_path(self) -> str | None:
        return None  # nothing known about it

    def check(self, profile: Profile) -> list[tuple[str, str]]:
        return self.park_problems(profile)  # it cannot park: nothing is known of its endpoints


ENGINE = CustomEngine()
