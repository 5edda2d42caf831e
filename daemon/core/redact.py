"""Secrets out of everything k25-ctl shows: command lines (`--api-key sk-…`, `--token=…`), environment
values whose names say secret (`*_TOKEN`, `*_KEY`, `*SECRET*`, `*PASSWORD*`) and free text (journal
excerpts, process titles). Applied where reads leave the daemon; the stored record keeps the truth."""

from __future__ import annotations

import re
from collections.abc import Mapping

MASK = "***"
# "token", not "tokens": --max-num-batched-tokens and --num-speculative-tokens are tuning, not secrets.
SECRET_NAME = re.compile(r"(TOKEN(?!S)|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
SECRET_FLAG = re.compile(
    r"^--?[\w.-]*(api[-_]?key|token(?!s)|secret|password|passwd|credential)[\w.-]*$", re.IGNORECASE
)
# In free text: a secret flag with its value (`--api-key X`, `--api-key=X`), NAME=value, bearer tokens and
# well-known key shapes.
TEXT_RES = (
    re.compile(r"(?i)(--?[\w.-]*(?:api[-_]?key|token(?!s)|secret|password|passwd)[\w.-]*)(=|\s+)(\S+)"),
    re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN(?!S)|_KEY|SECRET|PASSWORD|PASSWD)[A-Z0-9_]*)=(\S+)"),
    re.compile(r"(?i)\b(bearer)\s+([A-Za-z0-9._~+/=-]{8,})"),
    re.compile(r"\b(sk|hf|ghp|xox[bp])[-_][A-Za-z0-9_-]{8,}"),
)


def argv(args: list[str]) -> list[str]:
    """A command line with the values of secret-looking flags masked."""
    out: list[str] = []
    hide_next = False
    for a in args:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = a.partition("=")
        if SECRET_FLAG.match(flag):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(a)
                hide_next = True
            continue
        out.append(text(a))
    return out


def env(values: Mapping[str, str]) -> dict[str, str]:
    return {k: MASK if SECRET_NAME.search(k) else v for k, v in values.items()}


def text(value: str) -> str:
    out = TEXT_RES[0].sub(lambda m: f"{m[1]}{m[2]}{MASK}", value)
    out = TEXT_RES[1].sub(lambda m: f"{m[1]}={MASK}", out)
    out = TEXT_RES[2].sub(lambda m: f"{m[1]} {MASK}", out)
    return TEXT_RES[3].sub(MASK, out)


def optional_text(value: str | None) -> str | None:
    return None if value is None else text(value)
