"""What an engine will see of a profile's `command`: its words, a shell's -c string included, and whether a
flag is among them (a parkable profile's `command` must carry the engine's park flags)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})


def command_words(command: Sequence[str]) -> tuple[list[str], bool]:
    """A `command`'s words as the engine will see them: its argv, and where it runs a shell (`/bin/sh -c
    "exec vllm serve ..."`: how operators source a venv or set limits first) the words of the -c string
    too (shlex, as the shell splits them). Whether a shell's string was read."""
    words = list(command)
    if not command or Path(command[0]).name not in SHELLS or "-c" not in command[1:]:
        return words, False
    at = command.index("-c", 1) + 1
    if at >= len(command):
        return words, False
    try:
        return words + shlex.split(command[at], comments=True), True
    except ValueError:  # unbalanced quotes: the shell would refuse it too; only the argv is known
        return words, False


def carries(words: Sequence[str], flag: str) -> bool:
    """`--flag` or `--flag=value` among the words."""
    return any(w == flag or w.startswith(flag + "=") for w in words)
