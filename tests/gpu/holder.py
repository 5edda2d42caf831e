"""A real CUDA process that holds GPU memory: `python holder.py DEVICE GIB` (DEVICE as CUDA numbers it,
so callers pin the GPU with CUDA_VISIBLE_DEVICES). Prints 'ready' once it holds the memory."""

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
