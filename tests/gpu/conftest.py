"""GPU tests: a real NVIDIA GPU through NVML (run through the device tool); skipped where NVML finds none.
Holders are this test's own children; a teardown only executes after the plan proved that its victims are
exactly those children."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemon.host.gpu import NvmlGpus

HOLDER = Path(__file__).with_name("holder.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session")
def nvml() -> NvmlGpus:
    gpus = NvmlGpus()
    if not gpus.gpus():
        pytest.skip("NVML finds no GPU here (GPU tests run on the device machine)")
    return gpus


@pytest.fixture
def holders() -> Iterator[Callable[[int, float], subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(gpu: int, gib: float) -> subprocess.Popen[str]:
        env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(gpu))  # NVML's index
        p = subprocess.Popen(
            [sys.executable, str(HOLDER), "0", str(gib)], stdout=subprocess.PIPE, text=True, env=env
        )
        started.append(p)
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()
