"""The engines' own programs as installed on this host: run one (its help, its package's version) with a
deadline and no GPU work, find an executable on a PATH, read a script's interpreter line, and a file's
modification time (what the caches of daemon/installed/ are keyed on)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

OUTPUT_LIMIT = 4 * 1024 * 1024  # an engine's help is ~100 KB; more is not a help text


@dataclass(frozen=True)
class CliAnswer:
    rc: int | None  # None: it did not end within the deadline, or could not be started
    out: str
    err: str


class EngineCli(Protocol):
    def run(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CliAnswer: ...

    def which(self, name: str, path: str | None) -> str | None: ...

    def interpreter(self, executable: str) -> list[str] | None: ...

    def mtime(self, path: str) -> float | None: ...


class LocalEngineCli:
    """Runs the programs on this machine (blocking: callers use a thread)."""

    def run(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CliAnswer:
        try:
            done = subprocess.run(  # noqa: S603 - the profile's own engine, never through a shell
                list(argv),
                env=dict(env),
                capture_output=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return CliAnswer(None, "", f"no answer within {timeout_s:g}s")
        except OSError as e:
            return CliAnswer(None, "", str(e))
        out = done.stdout[:OUTPUT_LIMIT].decode(errors="replace")
        return CliAnswer(done.returncode, out, done.stderr[-65536:].decode(errors="replace"))

    def which(self, name: str, path: str | None) -> str | None:
        return shutil.which(name, path=path)

    def interpreter(self, executable: str) -> list[str] | None:
        """A script's `#!` line as words (`/usr/bin/env python3` included); None for a binary."""
        try:
            with Path(executable).open("rb") as f:
                head = f.readline(512)
        except OSError:
            return None
        if not head.startswith(b"#!"):
            return None
        try:
            return shlex.split(head[2:].decode(errors="replace").strip())
        except ValueError:
            return None

    def mtime(self, path: str) -> float | None:
        try:
            return Path(path).stat().st_mtime
        except OSError:
            return None
