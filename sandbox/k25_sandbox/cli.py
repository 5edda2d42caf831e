"""`k25-ctl sandbox`: the sandbox's own commands, added to k25-ctl's CLI through the entry points of group
`k25_ctl.sandbox` (daemon/cli/plugins.py): `commands` adds them, `running_demo` names the demo sandbox the
CLI talks to on a host without an install. The daemon imports nothing from this package."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.plugins import Demo, SubParsers
from daemon.core.errors import HostTimeout, InvalidInput
from daemon.core.settings import Settings
from k25_sandbox import sandbox
from k25_sandbox.sandbox import SandboxInfo


def running_demo() -> Demo | None:
    """The running demo sandbox (the entry point `running_demo`)."""
    demo = sandbox.running_demo()
    return Demo(demo.name, demo.url, demo.config) if demo is not None else None


def add_commands(sub: SubParsers) -> None:
    """`k25-ctl sandbox up|down|status|shell` (the entry point `commands` of k25_ctl.sandbox)."""
    p = sub.add_parser("sandbox", help="a real systemd in namespaces with fake engines (tests, demo)")
    p.add_argument("action", choices=("up", "down", "status", "shell"))
    p.add_argument("name", nargs="?", help="which sandbox (default: the newest)")
    p.add_argument("--port", type=int, help="the daemon's API port (default: a free one)")
    p.add_argument("--profiles", type=Path, help="a folder of extra profiles to add")
    p.add_argument("--load-seconds", type=float, default=2.0, help="fake engines' weight loading time")
    p.add_argument(
        "--bind",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="up: a folder the daemon must see (model folders that --profiles names; repeatable)",
    )
    p.add_argument(
        "--weights",
        type=Path,
        metavar="DIR",
        help="up: the stock profiles read real weight files from DIR (made there once, 256 MiB)",
    )
    p.add_argument(
        "--park",
        action="append",
        default=[],
        metavar="PROFILE",
        help="up: this stock profile parks (a switch away sleeps it, the way back wakes it; repeatable)",
    )
    p.add_argument(
        "--activate",
        metavar="PROFILE",
        help="up: start this profile's engine once booted; returns when the daemon says it is active",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="up: a daemon setting for this sandbox, VALUE as TOML (--set service_port=8000 --set "
        "drain_grace_s=2; repeatable)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_command)


def _settings(pairs: list[str]) -> dict[str, str]:
    """--set KEY=VALUE pairs; a clear error for one without '='."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise InvalidInput(f"--set {pair!r}: expected KEY=VALUE (a TOML value: --set drain_grace_s=2)")
        if key.strip() not in Settings.model_fields:
            raise InvalidInput(f"--set {pair!r}: k25-ctl has no setting {key.strip()!r}")
        out[key.strip()] = value.strip()
    return out


def _command(args: argparse.Namespace) -> int:
    if args.action == "up":
        info = sandbox.up(
            port=args.port,
            profiles=args.profiles,
            load_seconds=args.load_seconds,
            binds=tuple(b.resolve() for b in args.bind),
            weights=args.weights.resolve() if args.weights else None,
            parks=tuple(args.park),
            settings=_settings(args.set) or None,
        )
        if args.activate:
            sandbox.start_profile(info, args.activate)
    else:
        info = sandbox.load(args.name)
    if args.action == "down":
        try:
            sandbox.down(info)
        except HostTimeout as e:  # what is left is listed below, and the exit is non-zero
            print(f"k25-ctl: {e}", file=sys.stderr)
        left = sandbox.leftovers(info)
        print(json.dumps({"down": info.name, "left": left}) if args.json else f"sandbox {info.name} down")
        return EXIT_OK if not left else EXIT_FAILED
    if args.action == "shell":
        argv = info.inside(["bash", "-l"])
        os.execvp(argv[0], argv)  # noqa: S606 - an interactive shell inside the sandbox
    if args.json:  # pid: the sandbox's own systemd (PID 1 inside); the daemon's is its MainPID there
        print(json.dumps(asdict(info) | {"alive": not _dead(info)}, indent=2))
    else:
        print(f"sandbox   {info.name} (its systemd: PID {info.pid})\nAPI       {info.url}")
        print(f"token     {info.token_file}")
        print(f"daemon    k25-ctl sandbox shell {info.name}, then systemctl status k25-ctl")
        print(f"shell     k25-ctl sandbox shell {info.name}\ndown      k25-ctl sandbox down {info.name}")
    return EXIT_OK


def _dead(info: SandboxInfo) -> bool:
    return not Path(f"/proc/{info.pid}").exists()
