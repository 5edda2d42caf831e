"""A real nginx (Debian's) in front of a sandbox host, mirroring every completion request to k25-ctl's
capture sink (ngx_http_mirror_module: the copy's answer is ignored, production never waits for it): the
capture test and the manual's snippet (docs/capture.md) run this configuration. The category comes from a
header the client sends (`X-App`), mapped by the balancer, as an operator would map a route or a virtual
host."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from daemon.core.errors import K25Error
from k25_sandbox.balancer import Proxy, foreground

# What the manual shows (docs/capture.md): the production location mirrors, the mirror location passes
# nothing of the client's headers (no API key, no cookie) and sets the capture token, the Host the daemon
# accepts and the category.
MIRROR = """map $http_x_app $k25_category {{
    default chat;
    ide code;
}}
upstream k25_capture {{
    server 127.0.0.1:{daemon_port};
}}
server {{
    listen 127.0.0.1:{port};
    location /v1/ {{
        mirror /k25-capture;
        proxy_pass http://engines;
        proxy_http_version 1.1;
        proxy_buffering off;
        proxy_read_timeout 600s;
    }}
    location = /k25-capture {{
        internal;
        proxy_pass http://k25_capture/capture$request_uri;
        proxy_pass_request_headers off;
        proxy_set_header Host localhost;
        proxy_set_header Content-Type application/json;
        proxy_set_header Authorization "Bearer {token}";
        proxy_set_header X-K25-Category $k25_category;
        proxy_connect_timeout 1s;
        proxy_read_timeout 5s;
    }}
}}
"""
# Around it, what a test needs to run nginx in the foreground from a folder of its own.
MAIN = """{user}daemon off;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{}}
http {{
    access_log off;
    client_body_temp_path {folder}/body;
    proxy_temp_path {folder}/proxy;
    fastcgi_temp_path {folder}/fastcgi;
    uwsgi_temp_path {folder}/uwsgi;
    scgi_temp_path {folder}/scgi;
    client_body_buffer_size 1m;
    upstream engines {{
        server 127.0.0.1:{engine_port};
    }}
{mirror}}}
"""


class Nginx(Proxy):
    def errors(self) -> str:
        return (self.folder / "error.log").read_text()


def config(*, port: int, engine_port: int, daemon_port: int, token: str, folder: Path) -> str:
    mirror = MIRROR.format(port=port, daemon_port=daemon_port, token=token)
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers write the folder's temp files
    indented = "".join(f"    {line}\n" if line else "\n" for line in mirror.splitlines())
    return MAIN.format(user=user, folder=folder, engine_port=engine_port, mirror=indented)


@contextlib.contextmanager
def nginx(
    *, port: int, engine_port: int, daemon_port: int, token: str, within_s: float = 20.0
) -> Iterator[Nginx]:
    """nginx in the foreground (this process started it, and stops it), up once it accepts."""
    folder = Path(tempfile.mkdtemp(prefix="nginx-"))
    cfg = folder / "nginx.conf"
    cfg.write_text(
        config(port=port, engine_port=engine_port, daemon_port=daemon_port, token=token, folder=folder)
    )
    cmd = ["nginx", "-c", str(cfg), "-p", str(folder)]
    check = subprocess.run([*cmd, "-t"], capture_output=True, text=True)
    if check.returncode != 0:
        raise K25Error(f"nginx refuses its config: {check.stderr}")
    with foreground(cmd, port, folder, ready=None, within_s=within_s) as p:
        yield Nginx(p.port, p.folder, p.process)
