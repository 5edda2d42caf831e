"""The flags an engine's own parser accepts, read from the help it prints, and a command's flags checked
against them (pure). Both engines print argparse's format (vLLM's `serve --help=all`, SGLang's
`launch_server --help`; docs/engines.md shows both): an option line starts, indented, with its flags
separated by ", " (each maybe followed by its metavar), then two spaces or a new line before its help."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

_OPTION = re.compile(r"(?:^|, )(--?[A-Za-z0-9][\w.\-]*)")
_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?$")
# A help that says the flag itself is deprecated ("deprecated: use --x", "is deprecated", "will be
# deprecated"), not one that mentions deprecated things ("allow deprecated quantization methods").
DEPRECATED = re.compile(
    r"\b(?:is|are|been|be|was|now)\s+deprecated\b|^\W*deprecated\b|\bdeprecated\s*[:;.)\]]", re.IGNORECASE
)


@dataclass(frozen=True)
class FlagList:
    """What an engine's parser accepts, and what its help says is deprecated (flag -> its help's words)."""

    flags: frozenset[str]
    deprecated: dict[str, str] = field(default_factory=dict)
    printed: tuple[str, ...] = ()  # deprecation warnings the engine printed while it told its flags

    def accepts(self, flag: str) -> bool:
        """`flag` itself, or the one flag it starts (argparse takes an unambiguous prefix)."""
        return flag in self.flags or len([f for f in self.flags if f.startswith(flag)]) == 1

    def full(self, flag: str) -> str:
        """The flag a (maybe abbreviated) accepted flag stands for."""
        if flag in self.flags:
            return flag
        return next((f for f in self.flags if f.startswith(flag)), flag)

    def nearest(self, flag: str) -> str | None:
        close = difflib.get_close_matches(flag, sorted(self.flags), n=1, cutoff=0.6)
        return close[0] if close else None


def _options(line: str) -> list[str]:
    """The flags an option line of argparse's help names ([] for any other line)."""
    text = line.strip()
    if not line.startswith(" ") or not text.startswith("-"):
        return []
    head = re.split(r"\s{2,}", text, maxsplit=1)[0]
    return _OPTION.findall(head)


def parse_help(text: str) -> FlagList:
    """Every flag of an argparse help text; a flag whose help mentions deprecation is marked so."""
    flags: set[str] = set()
    deprecated: dict[str, str] = {}
    current: list[str] = []
    words: list[str] = []

    def close() -> None:
        said = " ".join(words)
        if current and DEPRECATED.search(said):
            for f in current:
                deprecated[f] = said
        words.clear()

    for line in text.splitlines():
        named = _options(line)
        if named:
            close()
            current = named
            flags.update(named)
            rest = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            words.extend(rest[1:])
        elif line.startswith(" ") and line.strip():
            words.append(line.strip())
        else:
            close()
            current = []
    close()
    return FlagList(frozenset(flags), deprecated)


def flag_words(words: Iterable[str], normalize: Callable[[str], str | None]) -> list[tuple[str, str]]:
    """The flags among a command's words after its entry: (as written, as the parser sees it). Values
    (negative numbers, JSON, paths) are not flags; `normalize` maps a written flag to the parser's name
    (None: not a flag the parser checks)."""
    out = []
    for w in words:
        if not w.startswith("-") or w == "-" or w == "--" or _NUMBER.match(w):
            continue
        name = normalize(w)
        if name is not None:
            out.append((w, name))
    return out


def plain_name(word: str) -> str | None:
    """argparse's reading of a flag word: `--flag=value` is `--flag`; a short flag's attached value
    (`-O3`) goes with its one letter."""
    if word.startswith("--"):
        return word.split("=", 1)[0]
    return word[:2]
