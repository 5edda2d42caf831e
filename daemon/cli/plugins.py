"""The sandbox's hooks into the CLI, found by entry point (group `k25_ctl.sandbox`), never imported by
name: the daemon's package carries no test double, and a production host has no sandbox. The sandbox
(sandbox/, distribution k25-sandbox) registers `commands` (adds `k25-ctl sandbox`) and `running_demo`
(the demo sandbox the CLI talks to on a host without an install)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import NamedTuple, TypeAlias

from daemon.cli.exit_codes import EXIT_USAGE

GROUP = "k25_ctl.sandbox"
MISSING = (
    "k25-ctl sandbox: the sandbox is not installed here. It is the tests' and the demo's (fake engines,"
    " simulated GPUs), never part of a production install: from a checkout, `bash scripts/setup.sh` installs"
    " it into .venv (or `pip install ./sandbox` beside k25-ctl)."
)
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


class Demo(NamedTuple):
    """A running demo sandbox, as the CLI needs it."""

    name: str
    url: str
    config: str  # its settings file (K25_CONFIG)


def _hook(name: str) -> Callable[..., object] | None:
    """The sandbox's hook, or None where none is installed (or it cannot be imported: a half-removed
    install; the commands then say how to get it, as without one)."""
    for ep in entry_points(group=GROUP, name=name):
        try:
            hook: Callable[..., object] = ep.load()
        except ImportError:
            return None
        return hook
    return None


def sandbox_commands(sub: SubParsers) -> None:
    """`k25-ctl sandbox ...` from the sandbox, or a command that says how to get it."""
    if (add := _hook("commands")) is not None:
        add(sub)
        return
    p = sub.add_parser("sandbox", help="not installed here: the tests' and the demo's sandbox")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=_missing)


def _missing(_args: argparse.Namespace) -> int:
    print(MISSING, file=sys.stderr)
    return EXIT_USAGE


def running_demo() -> Demo | None:
    """The running demo sandbox (None: none runs, or no sandbox is installed)."""
    found = _hook("running_demo")
    demo = found() if found is not None else None
    return demo if isinstance(demo, Demo) else None
