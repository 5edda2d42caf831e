"""A real CUDA process that parks as vLLM does (level 1), for the GPU tests: `python sleeper.py GIB`, then
HTTP on a free port, printed as 'ready PORT'. POST /sleep?level=1 copies its weights to pinned host memory
and frees the GPU memory (torch.cuda.empty_cache); POST /wake_up copies them back; GET /is_sleeping; GET
/checksum (of the weights); POST /grow?gib=N allocates more (a parked engine that misbehaves).
`python sleeper.py --hot-load FILE BYTES` times loading a file's bytes into GPU memory, and exits."""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import torch

if sys.argv[1] == "--hot-load":  # the same bytes from a hot page cache into GPU memory, timed
    path, size = sys.argv[2], int(sys.argv[3])
    began = time.perf_counter()
    loaded = torch.from_file(path, shared=False, size=size, dtype=torch.uint8).to("cuda")
    torch.cuda.synchronize()
    sys.stdout.write(f"{time.perf_counter() - began}\n")
    sys.exit(0)

gib = float(sys.argv[1])
weights: torch.Tensor | None = torch.randint(0, 255, (int(gib * 2**30),), dtype=torch.uint8, device="cuda")
host: torch.Tensor | None = None
extra: list[torch.Tensor] = []


def checksum() -> int:
    t = weights if weights is not None else host
    assert t is not None
    return int(t.view(torch.int64).sum().item()) if t.numel() % 8 == 0 else int(t.sum().item())


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *_: object) -> None:
        pass

    def _answer(self, body: dict[str, object], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urlparse(self.path).path
        if path == "/is_sleeping":
            self._answer({"is_sleeping": weights is None})
        elif path == "/checksum":
            self._answer({"checksum": checksum()})
        else:
            self._answer({"error": "no such path"}, 404)

    def do_POST(self) -> None:
        global weights, host
        url = urlparse(self.path)
        began = time.perf_counter()
        if url.path == "/sleep" and weights is not None:
            host = torch.empty(weights.shape, dtype=weights.dtype, pin_memory=True)
            host.copy_(weights)
            weights = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        elif url.path == "/wake_up" and host is not None:
            weights = torch.empty(host.shape, dtype=host.dtype, device="cuda")
            weights.copy_(host, non_blocking=True)
            torch.cuda.synchronize()
            host = None
        elif url.path == "/grow":
            n = float(parse_qs(url.query).get("gib", ["1"])[0])
            extra.append(torch.ones(int(n * 2**30), dtype=torch.uint8, device="cuda"))
            torch.cuda.synchronize()
        self._answer({"seconds": time.perf_counter() - began})


server = HTTPServer(("127.0.0.1", 0), Handler)
sys.stdout.write(f"ready {server.server_address[1]}\n")
sys.stdout.flush()
server.serve_forever()
