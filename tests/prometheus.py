"""A real Prometheus (Debian's) for the tests: scraping sandbox daemons every second with the project's
alert rules loaded (contrib/prometheus), and its query API."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from k25_sandbox.ports import free_port
from tests.conftest import ROOT
from tests.waiting import eventually_sync

PROMETHEUS = "/usr/bin/prometheus"
RULES = ROOT / "contrib/prometheus/k25-ctl.rules.yml"


@contextlib.contextmanager
def prometheus(folder: Path, urls: list[str], token_file: str | None = None) -> Iterator[httpx.Client]:
    """Prometheus scraping the daemons at `urls` as job k25-ctl (with the write token where given), its
    API client once it is ready; stopped when the `with` ends."""
    if not Path(PROMETHEUS).exists():
        pytest.fail(f"{PROMETHEUS} is missing: scripts/setup.sh installs Debian's prometheus")
    port = free_port()
    config = folder / "prometheus.yml"
    auth = f"    authorization: {{credentials_file: '{token_file}'}}\n" if token_file else ""
    targets = ", ".join(f"'{u.removeprefix('http://')}'" for u in urls)
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n"
        "  - job_name: k25-ctl\n"
        f"{auth}"
        f"    static_configs: [{{targets: [{targets}]}}]\n"
    )
    log = (folder / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        prom = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        # Until its storage is open, Prometheus answers every API call 503 "Service Unavailable", in text
        # (CI: a JSONDecodeError in the first query); /-/ready says when it is.
        eventually_sync(lambda: prom.get("/-/ready").status_code == 200, what="Prometheus ready",
                        within_s=60, tolerate=(httpx.HTTPError,))  # fmt: skip
        yield prom
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def query(prom: httpx.Client, expr: str) -> list[Any]:
    body = prom.get("/api/v1/query", params={"query": expr}).json()
    assert body["status"] == "success", body
    result: list[Any] = body["data"]["result"]
    return result
