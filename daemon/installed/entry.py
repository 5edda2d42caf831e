"""Where a profile's engine starts (pure but for the host port's lookups): the words that run it (its
entry: `vllm serve`, `python launcher.py serve`, `python -m sglang.launch_server`), the arguments after
them, its environment, and the Python that runs it (whose package metadata says the engine's version)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

from daemon.core.profiles import Profile
from daemon.engines.base import Engine
from daemon.engines.shell_words import command_words
from daemon.host.engine_cli import EngineCli

# Where a shell's command list moves on to another command: the entry starts after the last of these.
SEPARATORS = frozenset({"&&", "||", "|", ";", "exec", "then", "do", "!", "nohup", "--"})
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"python[\d.]*$")


@dataclass(frozen=True)
class Entry:
    argv: tuple[str, ...]  # the words that start the engine, the first resolved to a path
    args: tuple[str, ...]  # the engine's own arguments (what its parser reads)
    env: dict[str, str]  # the engine's environment
    interpreter: tuple[str, ...] | None  # the Python that runs it; None: not a Python entry


def _command(words: list[str], end: int) -> tuple[list[str], list[str], dict[str, str]]:
    """The one command of a shell's list that holds the entry (which ends at `end`): its entry words,
    its arguments up to the next separator, and the variables assigned before it."""
    start = max((i + 1 for i, w in enumerate(words[:end]) if w in SEPARATORS or w.endswith(";")), default=0)
    head = words[start:end]
    assigned: dict[str, str] = {}
    while head and ASSIGNMENT.match(head[0]) and len(head) > 1:
        key, _, value = head.pop(0).partition("=")
        assigned[key] = value
    stop = next((i for i, w in enumerate(words[end:], end) if w in SEPARATORS or w.endswith(";")), len(words))
    args = words[end:stop]
    if stop < len(words) and words[stop].endswith(";") and words[stop] != ";":
        args.append(words[stop].removesuffix(";"))
    return head, args, assigned


def find_entry(profile: Profile, engine: Engine, cli: EngineCli, base_env: Mapping[str, str]) -> Entry | str:
    """The profile's engine entry, or why it cannot be found (a wrapper that hides the engine)."""
    argv = engine.argv(profile)
    words, _ = command_words(argv) if profile.command is not None else (argv, False)
    if profile.command is not None and len(words) > len(argv):
        words = words[len(argv) :]  # a shell's -c string: its words are the command
    end = engine.entry_end(words)
    if end is None:
        return f"the command does not show {engine.label}'s entry (a wrapper script hides it)"
    head, args, assigned = _command(words, end)
    env = dict(base_env) | engine.environment(profile) | assigned
    if not head:
        return f"no program before {engine.label}'s entry in the command"
    first = head[0]
    resolved = first if "/" in first else cli.which(first, env.get("PATH"))
    if resolved is None:
        return f"{first} is not on the engine's PATH ({env.get('PATH', '')})"
    return Entry((resolved, *head[1:]), tuple(args), env, _interpreter(resolved, cli, env))


def _interpreter(program: str, cli: EngineCli, env: Mapping[str, str]) -> tuple[str, ...] | None:
    if PYTHON.match(PurePath(program).name):
        return (program,)
    line = cli.interpreter(program)  # a console script: its #! line names its Python
    if not line:
        return None
    if PurePath(line[0]).name == "env" and len(line) > 1:
        found = cli.which(line[1], env.get("PATH"))
        return (found,) if found and PYTHON.match(PurePath(found).name) else None
    return (line[0],) if PYTHON.match(PurePath(line[0]).name) else None
