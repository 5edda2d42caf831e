"""PyTorch's allocator settings as the engines' processes read them (docs/engines.md, "Parking: what it
costs on the host"): `PYTORCH_CUDA_ALLOC_CONF` (newer torch also reads `PYTORCH_ALLOC_CONF`), a
comma-separated list of `key:value`. A level-1 park backs the weights up into
`torch.empty(..., pin_memory=True)` (vllm/device_allocator/cumem.py): with
`pinned_use_cuda_host_register:True` torch's caching host allocator maps plain pages and registers them
with `pinned_num_register_threads` threads instead of `cudaHostAlloc` (c10/cuda/CUDAAllocatorConfig: a
power of 2, at most 128), 4.5x faster on an H200 host."""

from __future__ import annotations

from collections.abc import Mapping

VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")  # the first that is set is read
REGISTER = "pinned_use_cuda_host_register"
THREADS = "pinned_num_register_threads"
EXPANDABLE = "expandable_segments"


def parse(value: str) -> dict[str, str]:
    """`a:1,b:True` -> {"a": "1", "b": "True"} (an entry without a colon is kept with an empty value)."""
    out: dict[str, str] = {}
    for item in value.split(","):
        if item.strip():
            key, _, val = item.partition(":")
            out[key.strip()] = val.strip()
    return out


def render(conf: Mapping[str, str]) -> str:
    return ",".join(f"{k}:{v}" if v else k for k, v in conf.items())


def variable(env: Mapping[str, str]) -> str:
    """Which variable the engine's torch reads here: the one the environment sets (the newer name first)."""
    return next((v for v in VARIABLES if v in env), "PYTORCH_CUDA_ALLOC_CONF")


def with_registered_pinning(env: Mapping[str, str], threads: int) -> dict[str, str]:
    """`env` with registered pinning on, merged into the allocator settings it has: a key the environment
    sets itself stays as it is."""
    name = variable(env)
    conf = parse(env.get(name, ""))
    conf.setdefault(REGISTER, "True")
    conf.setdefault(THREADS, str(threads))
    return dict(env) | {name: render(conf)}


def registered(env: Mapping[str, str]) -> bool:
    """Whether torch in this environment pins by registered pages."""
    return parse(env.get(variable(env), "")).get(REGISTER, "").lower() == "true"


def expandable(env: Mapping[str, str]) -> bool:
    return any(parse(env.get(v, "")).get(EXPANDABLE, "").lower() == "true" for v in VARIABLES)
