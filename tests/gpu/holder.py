"""A real CUDA process that holds GPU memory: `python holder.py GPU GIB`. Prints 'ready' once it does."""

from __future__ import annotations

import signal
import sys

import torch

device, gib = int(sys.argv[1]), float(sys.argv[2])
block = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=f"cuda:{device}")
block.fill_(1)
torch.cuda.synchronize()
sys.stdout.write("ready\n")
sys.stdout.flush()
signal.pause()
