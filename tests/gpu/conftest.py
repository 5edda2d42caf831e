"""GPU tests: a real NVIDIA GPU through NVML (run through the device tool); skipped where NVML finds none.
Holders are this test's own children; a teardown only executes after the plan proved that its victims are
exactly those children."""

from __future__ import annotations

import os
import site
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.host.gpu import GpuUnavailable, NvmlGpus

HOLDER = Path(__file__).with_name("holder.py")


@pytest.fixture(scope="session")
def nvml() -> NvmlGpus:
    gpus = NvmlGpus()
    try:
        found = gpus.gpus()
    except GpuUnavailable:
        found = []
    if not found:
        pytest.skip("NVML finds no GPU here (GPU tests run on the device machine)")
    return gpus


Holders = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def holders() -> Iterator[Holders]:
    started: list[subprocess.Popen[str]] = []

    def start(gpu: int, gib: float, title: str | None = None) -> subprocess.Popen[str]:
        """A CUDA process holding `gib` on GPU `gpu`; `title` replaces its argv[0] (what ps shows), as an
        engine's worker title would."""
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu))  # NVML's index
        if title:  # with another argv[0] Python no longer finds its venv: hand it this one's packages
            env["PYTHONPATH"] = os.pathsep.join([*site.getsitepackages(), *sys.path[1:]])
        argv = [title or sys.executable, str(HOLDER), "0", str(gib)]
        p = subprocess.Popen(argv, executable=sys.executable, stdout=subprocess.PIPE, text=True, env=env)
        started.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()
