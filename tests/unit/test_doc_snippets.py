"""The manual's load-balancer snippets (docs/load-balancer.md, docs/capture.md) are real: HAProxy's is the configuration the drain test runs (and
`haproxy -c` accepts it), nginx's passes `nginx -t`, the Kubernetes probe parses and points at /ready."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from k25_sandbox.balancer import CONFIG
from k25_sandbox.mirror import MIRROR
from tests.conftest import ROOT


def _snippet(lang: str, page: str = "load-balancer.md") -> str:
    section = (ROOT / "docs" / page).read_text()
    found = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert found is not None, f"no {lang} snippet in docs/{page}"
    return found.group(1)


def _directives(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if line.startswith("    ") and "server " not in line}


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy: scripts/setup.sh installs it")
def test_the_haproxy_snippet_is_what_the_drain_test_runs(tmp_path: Path) -> None:
    snippet = _snippet("haproxy")
    tested = CONFIG.format(sock=tmp_path / "s", port=1, inter="1s", servers="")
    backend = tested[tested.index("backend engines") :]
    assert _directives(snippet) == _directives(backend)  # the same checks, timings and thresholds
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text("defaults\n    mode http\n    timeout connect 2s\n    timeout client 60s\n"
                   "    timeout server 60s\nfrontend clients\n    bind 127.0.0.1:18080\n"
                   "    default_backend engines\n" + snippet)  # fmt: skip
    check = subprocess.run(["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx: scripts/setup.sh installs it")
def _nginx_t(folder: Path, http: str) -> None:
    """`nginx -t` of a configuration whose http block holds `http`."""
    conf = folder / "nginx.conf"
    conf.write_text(
        f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log;\nevents {{}}\n"
        f"http {{\n    access_log off;\n{http}}}\n"
    )
    check = subprocess.run(
        ["nginx", "-t", "-c", str(conf), "-p", str(folder)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    assert "syntax is ok" in check.stderr


def test_the_nginx_snippet_passes_nginx_t(tmp_path: Path) -> None:
    _nginx_t(tmp_path, _snippet("nginx"))


def test_the_kubernetes_probe_checks_ready() -> None:
    probe = yaml.safe_load(_snippet("yaml"))["readinessProbe"]
    assert probe["httpGet"] == {"path": "/ready", "port": 8025}
    assert (probe["periodSeconds"], probe["failureThreshold"], probe["successThreshold"]) == (1, 2, 1)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx: scripts/setup.sh installs it")
def test_the_nginx_mirror_snippet_is_what_the_capture_test_runs(tmp_path: Path) -> None:
    snippet = _snippet("nginx", "capture.md")
    tested = MIRROR.format(port=8080, daemon_port=8025, token="CAPTURE_TOKEN").replace(
        "127.0.0.1:8080", "8080"
    )
    assert [line.strip() for line in snippet.splitlines()] == [line.strip() for line in tested.splitlines()]
    _nginx_t(tmp_path, f"    upstream engines {{ server 127.0.0.1:8000; }}\n{snippet}")
