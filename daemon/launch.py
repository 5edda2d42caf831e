"""`k25-ctl launch PROFILE`: what an engine unit runs. Renders the profile's argv and environment and
exec()s it, so the engine becomes the unit's main process and `systemctl status` shows it."""

from __future__ import annotations

import os
import shutil

from daemon.engines import engine_for
from daemon.errors import InvalidInput, NotFound
from daemon.profiles import InvalidProfile, parse_profile
from daemon.settings import Settings


def resolve(settings: Settings, name: str) -> tuple[list[str], dict[str, str]]:
    path = settings.profiles_path / f"{name}.toml"
    if not path.is_file():
        raise NotFound(f"no profile {name!r} in {settings.profiles_path}")
    item = parse_profile(path, check_paths=settings.check_model_paths)
    if isinstance(item, InvalidProfile):
        raise InvalidInput(str(item))
    engine = engine_for(item.profile)
    env = dict(os.environ)
    env.update(engine.environment(item.profile))
    return engine.argv(item.profile), env


def exec_profile(settings: Settings, name: str) -> None:
    argv, env = resolve(settings, name)
    exe = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    os.execve(exe, argv, env)  # noqa: S606 - the profile's command is the point of a launcher
