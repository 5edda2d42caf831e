"""The `k25-ctl` console script. `k25-ctl launch PROFILE` (what every engine unit runs, once per engine
start) goes straight to the launch: it needs the profile and the engine's knowledge, not the HTTP client
and the other commands' parsers that the full command line imports (a third of its start-up)."""

from __future__ import annotations

import sys

from daemon.cli.exit_codes import EXIT_FAILED, EXIT_USAGE


def main() -> int:
    args = sys.argv[1:]
    if len(args) != 2 or args[0] != "launch" or args[1].startswith("-"):
        from daemon.cli.main import main as full

        return full()
    from daemon.core.errors import K25Error
    from daemon.core.settings import load_settings
    from daemon.switching.launch import exec_profile

    try:
        exec_profile(load_settings(), args[1])
    except K25Error as e:  # said as the full command says it (cli/main.py)
        print(f"k25-ctl: {e}", file=sys.stderr)
        return EXIT_USAGE if e.status_code in (404, 422) else EXIT_FAILED
    return EXIT_FAILED  # exec_profile only returns by raising
