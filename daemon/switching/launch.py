"""`k25-ctl launch PROFILE`: what an engine unit runs. It execs exactly the argv and environment that the
daemon recorded for the switch (the launch file), so the run's record and the running engine never differ;
without a launch file (a unit started by hand before any switch) it renders the profile itself."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

from daemon.core.errors import InvalidInput, NotFound
from daemon.core.profiles import ENGINE_UNIT_PREFIX, InvalidProfile, LoadedProfile
from daemon.core.settings import Settings
from daemon.engines import engine_for
from daemon.engines.checks import parse_checked_profile


def launch_file(settings: Settings, name: str) -> Path:
    return settings.state_dir / "launch" / f"{name}.json"


def launch_name(unit: str, profile: str) -> str:
    """What `k25-ctl launch` is given: the instance of a k25-engine@ unit (a sweep's variant runs under
    k25-engine@BASE.vN), else the profile's name."""
    instance = unit.removeprefix(ENGINE_UNIT_PREFIX).removesuffix(".service")
    return instance if unit.startswith(ENGINE_UNIT_PREFIX) and instance else profile


def write_launch(settings: Settings, lp: LoadedProfile, *, run_id: int, argv: list[str]) -> Path:
    """Atomically, readable by root only (the environment may carry secrets)."""
    path = launch_file(settings, launch_name(lp.profile.unit, lp.profile.name))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = engine_for(lp.profile).environment(
        lp.profile, settings.engine_cache_dir, pin_threads=settings.park_pin_threads
    )
    data = {"run_id": run_id, "profile_sha256": lp.sha256, "file": str(lp.file), "argv": argv, "env": env}
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    tmp.replace(path)
    return path


def _render(settings: Settings, name: str) -> tuple[list[str], dict[str, str]]:
    path = settings.profiles_path / f"{name}.toml"
    if not path.is_file():
        raise NotFound(f"no profile {name!r} in {settings.profiles_path}")
    item = parse_checked_profile(path, check_paths=settings.check_model_paths)
    if isinstance(item, InvalidProfile):
        raise InvalidInput(str(item))
    profile = item.profile
    if settings.service_port is not None:  # as the daemon renders it: every engine on the service port
        profile = profile.model_copy(update={"port": settings.service_port})
    engine = engine_for(profile)
    env = engine.environment(profile, settings.engine_cache_dir, pin_threads=settings.park_pin_threads)
    return engine.argv(profile), env


def resolve(settings: Settings, name: str) -> tuple[list[str], dict[str, str]]:
    recorded = launch_file(settings, name)
    if recorded.is_file():
        data = json.loads(recorded.read_text())
        try:
            now = hashlib.sha256(Path(data["file"]).read_bytes()).hexdigest()
        except OSError:
            now = None
        if now != data["profile_sha256"]:
            print(  # noqa: T201 - goes to the unit's journal
                f"k25-ctl launch: {data['file']} changed since run {data['run_id']} recorded it; running "
                "what that run recorded (switch again, or reload, to apply the change)",
                file=sys.stderr,
            )
        argv, extra = list(data["argv"]), dict(data["env"])
    else:
        argv, extra = _render(settings, name)
    return argv, dict(os.environ) | extra


def exec_profile(settings: Settings, name: str) -> None:
    argv, env = resolve(settings, name)
    exe = shutil.which(argv[0], path=env.get("PATH")) or argv[0]
    os.execve(exe, argv, env)  # noqa: S606 - the profile's command is the point of a launcher
