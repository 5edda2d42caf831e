"""Rendered profiles in the sandbox: profiles without a `command`, whose argv k25-ctl renders for the real
engine (`vllm serve MODEL ...`, `python3 -m sglang.launch_server ...`), answered by the fake engine. A
folder of shims stands first on the engine's PATH (the profile's environment): `vllm` and `python3 -m
sglang.launch_server` run the fake engine with the rendered flags (those it knows act: port, model,
parking's; the others are ignored), every other `python3` is the system's. What the fake engine needs
beyond the real flags (its load time, token rate, faults) comes from K25_FAKE_ENGINE_ARGS."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from k25_sandbox.layout import profile_head, speculative_table

FAKE_ARGS_ENV = "K25_FAKE_ENGINE_ARGS"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_FAKE = f"{shlex.quote(sys.executable)} -m k25_sandbox.fake_engine --rendered --flavor"
_SHIMS = {
    "vllm": f"""#!/bin/sh
# k25-ctl rendered `vllm serve MODEL ...`: the sandbox's fake vLLM answers it.
[ "$1" = serve ] && shift
case "$1" in -h|--help*) exec {_FAKE} vllm serve "$@" ;; esac  # what it accepts: `serve --help=all`
model=$1; shift
exec {_FAKE} vllm --model "$model" "$@" ${FAKE_ARGS_ENV}
""",
    "python3": f"""#!/bin/sh
# k25-ctl rendered `python3 -m sglang.launch_server ...`: the sandbox's fake SGLang answers it.
if [ "$1" = -m ] && [ "$2" = sglang.launch_server ]; then
    shift 2
    exec {_FAKE} sglang "$@" ${FAKE_ARGS_ENV}
fi
exec /usr/bin/python3 "$@"
""",
}


def write_engine_shims(folder: Path) -> Path:
    """The shims in `folder` (made if missing); returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in _SHIMS.items():
        path = folder / name
        path.write_text(text)
        path.chmod(0o755)
    return folder


def rendered_profile(
    name: str,
    *,
    flavor: str,
    port: int,
    model: Path,
    shims: Path,
    fake_args: tuple[str, ...] = (),
    park: str | None = None,
    spec_k: int | None = None,
) -> str:
    """A profile file for the real engine's rendered argv, the fake engine answering it."""
    lines = profile_head(
        f"{name} (rendered for {flavor}; the fake engine answers)", flavor, model, port, 10.0
    )
    if park is not None:
        lines.append(f'park = "{park}"')
    if spec_k is not None:
        lines += speculative_table(model.parent, spec_k)
    env = {"PATH": f"{shims}:{SYSTEM_PATH}", FAKE_ARGS_ENV: shlex.join(fake_args)}
    lines += ["", "[environment]", *(f"{k} = {json.dumps(v)}" for k, v in env.items())]
    return "\n".join(lines) + "\n"
