"""`k25-ctl check-profiles`: the profiles folder validated as the daemon reads it, each profile's engine
as installed asked for its version and flags (once per version: the daemon's cache where this user may
write it), with each rendered argv."""

from __future__ import annotations

import argparse
import functools
import json
import os

from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.core.profile_files import PRIVATE_TMP_HINT, model_paths, under_private_tmp
from daemon.core.settings import load_settings
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.host.engine_cli import LocalEngineCli
from daemon.installed.cache import InstalledCache
from daemon.installed.engines import InstalledEngines


def check_profiles(args: argparse.Namespace) -> int:
    settings = load_settings()
    directory = args.dir or settings.profiles_path
    check_paths = settings.check_model_paths and not args.no_paths
    cache_path = settings.installed_cache_path
    writable = os.access(cache_path if cache_path.exists() else cache_path.parent, os.W_OK)
    installed = InstalledEngines(
        LocalEngineCli(),
        InstalledCache(cache_path if writable else None),
        os.environ,
        settings.engine_help_timeout_s,
    )
    load = functools.partial(
        load_checked_profiles, directory, check_paths=check_paths, service_port=settings.service_port
    )
    result = load() if args.no_engines else installed.load(lambda extra: load(extra=extra))
    valid = {}
    warnings = []
    for n, lp in result.valid.items():
        found = installed.seen(n)
        valid[n] = {
            "file": str(lp.file),
            "argv": engine_for(lp.profile).argv(lp.profile),
            "unit": lp.profile.unit,
            "engine": found.installed.describe() if found else None,
            "engine_version": found.installed.version if found else None,
        }
        warnings += [f"{n}: {w}" for w in (found.warnings if found else ())]
    invalid = [str(inv) for inv in result.invalid]
    warnings += [  # paths that exist where the operator runs this, maybe not for the daemon
        f"{lp.profile.name}: {key}: {what} path {where}: {PRIVATE_TMP_HINT}"
        for lp in result.valid.values()
        for key, what, where in model_paths(lp.profile)
        if under_private_tmp(where)
    ]
    if args.json:
        out = {"valid": valid, "invalid": invalid, "warnings": warnings, "engines_asked": installed.asked}
        print(json.dumps(out, indent=2))
    else:
        for name, info in valid.items():
            print(f"ok       {name:20} {info['unit']:32} {info['engine'] or ''}".rstrip())
        for line in invalid:
            print(f"INVALID  {line}")
        for line in warnings:
            print(f"WARNING  {line}")
        if settings.service_port is not None:
            port = settings.service_port
            print(f"note: service_port = {port}: every engine listens on it (profiles' own ports overridden)")
    return EXIT_OK if not result.invalid else EXIT_FAILED
