"""A real HAProxy (Debian's) in front of sandbox hosts, for the drain test and perf/downtime.py: it checks
each host's /ready as an operator's would (the manual's snippet, docs/load-balancer.md), and its stats
socket says when it took a host out. And the clients' side: a load that keeps N requests in flight through
it and keeps every answer."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from daemon.core.errors import K25Error

CONFIG = """global
    stats socket {sock} mode 600 level admin
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 0
frontend clients
    bind 127.0.0.1:{port}
    default_backend engines
backend engines
    balance roundrobin
    option httpchk
    http-check send meth GET uri /ready ver HTTP/1.1 hdr Host localhost
    default-server inter {inter} fall 2 rise 1
{servers}
"""


@dataclass(frozen=True)
class Host:
    """One server line: the engines' service port, health-checked on the daemon's port."""

    name: str
    port: int
    daemon_port: int


@dataclass
class Proxy:
    """A balancer this process started: its port, its folder (config, logs) and its process."""

    port: int
    folder: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def foreground(
    cmd: list[str], port: int, folder: Path, *, ready: Path | None, within_s: float
) -> Iterator[Proxy]:
    """`cmd` in the foreground (its output in the folder's `out.log`) until the `with` ends, up once it
    accepts on `port` (and `ready` exists, when given); stopped with SIGTERM."""
    log = (folder / "out.log").open("wb")
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    proxy = Proxy(port, folder, process)
    try:
        deadline = time.monotonic() + within_s
        while (ready is not None and not ready.exists()) or not accepts(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise K25Error(f"{cmd[0]} did not come up: {(folder / 'out.log').read_text()}")
            time.sleep(0.05)
        yield proxy
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


class Haproxy(Proxy):
    def servers(self) -> dict[str, dict[str, str]]:
        """`show stat` of the backend's servers: status (UP/DOWN), chkdown (times taken out), ..."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.folder / "admin.sock"))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        keys = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(keys, line.split(","), strict=False)) for line in lines[1:] if line]
        skip = ("FRONTEND", "BACKEND")
        return {r["svname"]: r for r in rows if r.get("pxname") == "engines" and r["svname"] not in skip}

    def served(self, name: str) -> int:
        """Requests HAProxy has sent to server `name` so far."""
        return int(self.servers()[name]["stot"])

    def serves_again(self, name: str, since: int) -> bool:
        """`name` is UP and has been sent requests beyond `since` (a few: it is back in rotation)."""
        row = self.servers()[name]
        return row["status"] == "UP" and int(row["stot"]) > since + 4


@contextlib.contextmanager
def haproxy(hosts: list[Host], port: int, *, inter: str = "1s", within_s: float = 20.0) -> Iterator[Haproxy]:
    """HAProxy in the foreground (this process started it, and stops it), up once it accepts."""
    folder = Path(tempfile.mkdtemp(prefix="haproxy-"))
    servers = "\n".join(f"    server {h.name} 127.0.0.1:{h.port} check port {h.daemon_port}" for h in hosts)
    cfg = folder / "haproxy.cfg"
    cfg.write_text(CONFIG.format(sock=folder / "admin.sock", port=port, inter=inter, servers=servers))
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    if check.returncode != 0:
        raise K25Error(f"haproxy refuses its config: {check.stdout}{check.stderr}")
    cmd = ["haproxy", "-db", "-f", str(cfg)]
    with foreground(cmd, port, folder, ready=folder / "admin.sock", within_s=within_s) as p:
        yield Haproxy(p.port, p.folder, p.process)


def accepts(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Answer:
    sent: float  # monotonic
    seconds: float
    ok: bool
    error: str | None = None


@dataclass
class Load:
    """`clients` threads, each sending one completion after the other through `url`: N in flight."""

    url: str
    clients: int = 8
    max_tokens: int = 16
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)

    def _client(self) -> None:
        body = {"model": "kimi-k2.5", "prompt": "hello", "max_tokens": self.max_tokens, "stream": False}
        with httpx.Client(timeout=60) as c:
            while not self._stop.is_set():
                began = time.monotonic()
                try:
                    r = c.post(f"{self.url}/v1/completions", json=body)
                    done = (
                        r.status_code == 200
                        and len(r.json()["choices"][0]["text"].split()) == self.max_tokens
                    )
                    answer = Answer(
                        began, time.monotonic() - began, done, None if done else f"HTTP {r.status_code}"
                    )
                except (httpx.HTTPError, ValueError, KeyError) as e:
                    answer = Answer(began, time.monotonic() - began, False, f"{type(e).__name__}: {e}")
                with self._lock:
                    self.answers.append(answer)

    def failed(self) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if not a.ok]

    def count(self) -> int:
        with self._lock:
            return len(self.answers)
