"""The fake engines as installed: a package's metadata says each flavour's version (a `.dist-info` folder
on the profile's PYTHONPATH, as pip leaves one in site-packages), and the help they print, in the real
engines' argparse format, changes with it like a real upgrade's (a flag dropped, one deprecated)."""

from __future__ import annotations

import importlib.metadata
import shutil
from pathlib import Path

from daemon.engines.as_installed import version_tuple

DEFAULT_VERSIONS = {"vllm": "0.32.0", "sglang": "0.5.4"}
ENTRY = {"vllm": "serve", "sglang": "launch_server"}  # the word that starts the engine's own arguments
# `--old-rate`: deprecated (its help says so), then gone from this version on, as vLLM drops flags.
OLD_RATE_GONE = (0, 40)
OLD_RATE = "--old-rate"
# The real engines' flags k25-ctl renders that the fake does not act on: it accepts and ignores them.
RENDERED_FLAGS = {
    "vllm": (
        "--tensor-parallel-size",
        "--trust-remote-code",
        "--gpu-memory-utilization",
        "--speculative-config",
    ),
    "sglang": (
        "--tp-size",
        "--trust-remote-code",
        "--mem-fraction-static",
        "--enable-metrics",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--speculative-num-steps",
    ),
}


def install(folder: Path, flavor: str, version: str) -> Path:
    """`folder` holds the flavour's package metadata at `version` (replacing any other: an upgrade);
    returns the folder, for the profile's PYTHONPATH."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{flavor}-*.dist-info"):
        if old.name != f"{flavor}-{version}.dist-info":
            shutil.rmtree(old)
    info = folder / f"{flavor}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {flavor}\nVersion: {version}\n")
    return folder


def folder_for(models: Path, flavor: str) -> Path:
    """Where a sandbox's fake `flavor` is installed (inside its models folder, which the sandbox shows its
    engines), installed at the default version unless a test upgraded it already."""
    folder = models / ".engines" / flavor
    if not any(folder.glob(f"{flavor}-*.dist-info")):
        install(folder, flavor, DEFAULT_VERSIONS[flavor])
    return folder


def version_of(flavor: str) -> str:
    """The version this fake engine is installed as (its metadata on PYTHONPATH, else the default)."""
    try:
        return importlib.metadata.version(flavor)
    except importlib.metadata.PackageNotFoundError:
        return DEFAULT_VERSIONS[flavor]


def has_old_rate(flavor: str) -> bool:
    return version_tuple(version_of(flavor)) < OLD_RATE_GONE
