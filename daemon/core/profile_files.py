"""Reading the profiles folder: one TOML file each in profiles.d/. Loading never raises for one bad file: it
returns the valid profiles and, for every invalid one, the file and key at fault with a message."""

from __future__ import annotations

import hashlib
import tomllib
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from daemon.core.profiles import InvalidProfile, LoadedProfile, Profile, ProfileProblem, ProfileSet


def _problems_from_validation(err: ValidationError) -> list[ProfileProblem]:
    out = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "missing":
            msg = "missing required key"
        if not loc:
            # Model-level checks name their key as "key: message".
            loc, _, msg = msg.removeprefix("Value error, ").partition(": ")
        else:
            msg = msg.removeprefix("Value error, ")
        out.append(ProfileProblem(loc, msg))
    return out


# Engine-specific validation, handed in by the caller (daemon.engines.checks): (key, message) per problem.
EngineCheck = Callable[[Profile], list[tuple[str, str]]]


PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))  # noqa: S108 - the folders PrivateTmp= hides, compared
PRIVATE_TMP_HINT = (
    "not visible to k25-ctl.service: PrivateTmp hides /tmp and /var/tmp; move the model or add a "
    "BindReadOnlyPaths= drop-in (docs/install.md)"
)


def model_paths(profile: Profile) -> list[tuple[str, str, str]]:
    """(key, what, path) of every folder the profile's engine reads weights from."""
    paths = [("model", "model", profile.model)]
    if profile.speculative is not None:
        paths.append(("speculative.draft_model", "drafter", profile.speculative.draft_model))
    return paths


def under_private_tmp(path: str) -> bool:
    return any(Path(path).is_relative_to(t) for t in PRIVATE_TMP)


def _exists(path: str) -> bool:
    try:
        return Path(path).exists()
    except (ValueError, OSError):  # a NUL in the path (a sweep's value), a name too long
        return False


def _hidden(path: str) -> str:
    """Why a path the operator sees may not exist for the daemon (its unit's PrivateTmp)."""
    return f" ({PRIVATE_TMP_HINT})" if under_private_tmp(path) else ""


def parse_profile(
    path: Path, *, check_paths: bool = False, engine_check: EngineCheck | None = None
) -> LoadedProfile | InvalidProfile:
    """Parse and validate one file on its own (cross-profile checks are in load_profiles)."""
    stem = path.stem
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        return InvalidProfile(path, stem, [ProfileProblem("(file)", f"cannot be read as TOML: {e}")])
    return profile_from_data(
        path, stem, data, hashlib.sha256(raw).hexdigest(), check_paths=check_paths, engine_check=engine_check
    )


def profile_from_data(
    path: Path,
    stem: str,
    data: dict[str, object],
    sha256: str,
    *,
    check_paths: bool = False,
    engine_check: EngineCheck | None = None,
) -> LoadedProfile | InvalidProfile:
    """Validate a profile's TOML data as its file `path` (named `stem`) would be."""
    data.setdefault("name", stem)
    try:
        profile = Profile.model_validate(data)
    except ValidationError as e:
        return InvalidProfile(path, stem, _problems_from_validation(e))
    problems = []
    if profile.name != stem:
        problems.append(ProfileProblem("name", f"{profile.name!r} differs from the file name {stem!r}"))
    if check_paths:
        for key, what, where in model_paths(profile):
            if not _exists(where):
                problems.append(ProfileProblem(key, f"{what} path {where} does not exist{_hidden(where)}"))
    if engine_check is not None:
        problems += [ProfileProblem(k, m) for k, m in engine_check(profile)]
    if problems:
        return InvalidProfile(path, stem, problems)
    return LoadedProfile(profile, path, sha256)


def load_profiles(
    directory: Path,
    *,
    check_paths: bool = False,
    engine_check: EngineCheck | None = None,
    service_port: int | None = None,
) -> ProfileSet:
    """Every profile file of the folder; `service_port`: every engine listens on that one port instead of
    its own (a balancer's fixed backend), so ports do not clash between profiles."""
    result = ProfileSet()
    try:
        files = sorted(p for p in directory.glob("*.toml") if p.is_file())
    except OSError as e:
        result.invalid.append(InvalidProfile(directory, "", [ProfileProblem("(dir)", str(e))]))
        return result
    ports: dict[tuple[str, int], str] = {}
    units: dict[str, str] = {}
    for path in files:
        item = parse_profile(path, check_paths=check_paths, engine_check=engine_check)
        if isinstance(item, InvalidProfile):
            result.invalid.append(item)
            continue
        if service_port is not None:
            moved = item.profile.model_copy(update={"port": service_port})
            item = LoadedProfile(moved, item.file, item.sha256)
        p = item.profile
        clash = []
        if service_port is None and (owner := ports.get((p.host, p.port))) is not None:
            clash.append(ProfileProblem("port", f"port {p.port} is already used by profile {owner!r}"))
        if (owner := units.get(p.unit)) is not None:
            clash.append(ProfileProblem("unit", f"unit {p.unit} is already used by profile {owner!r}"))
        if clash:
            result.invalid.append(InvalidProfile(path, p.name, clash))
            continue
        ports[(p.host, p.port)] = p.name
        units[p.unit] = p.name
        result.valid[p.name] = item
    return result
