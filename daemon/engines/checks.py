"""Profiles as the engines see them: the profile loader with each engine's own checks applied (profiles.py
knows no engine; this module joins the two), and any check of the engines as installed (`extra`:
daemon/installed/engines.py's, which asks the host's engines)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemon.core.profile_files import load_profiles, parse_profile
from daemon.core.profiles import InvalidProfile, LoadedProfile, Profile, ProfileSet
from daemon.engines import engine_for

ExtraCheck = Callable[[Profile], list[tuple[str, str]]]


def engine_check(profile: Profile) -> list[tuple[str, str]]:
    return engine_for(profile).check(profile)


def _with(extra: ExtraCheck | None) -> ExtraCheck:
    if extra is None:
        return engine_check
    return lambda p: engine_check(p) or extra(p)  # the installed engine is asked only of a sound profile


def load_checked_profiles(
    directory: Path,
    *,
    check_paths: bool = False,
    service_port: int | None = None,
    extra: ExtraCheck | None = None,
) -> ProfileSet:
    return load_profiles(
        directory, check_paths=check_paths, engine_check=_with(extra), service_port=service_port
    )


def parse_checked_profile(path: Path, *, check_paths: bool = False) -> LoadedProfile | InvalidProfile:
    return parse_profile(path, check_paths=check_paths, engine_check=engine_check)
