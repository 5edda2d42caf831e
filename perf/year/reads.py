"""Reading a host's history through its daemon: each read endpoint the page and the CLI use, timed over
HTTP (p50 and p99), and the page's load in headless Chromium (from navigation until the page has all six
of its first reads and has drawn the host's state)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

CHROMIUM = "/usr/bin/chromium"
PAGE_READS = ("/status", "/profiles", "/runs?limit=15", "/compare", "/experiments?limit=10", "/host")


@dataclass(frozen=True)
class Timing:
    p50_ms: float
    p99_ms: float
    max_ms: float
    status: int


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000


def endpoints(c: httpx.Client) -> dict[str, str]:
    """The reads to time: the page's, the CLI's lists and details (the newest of each kind where the
    history has one), by label."""
    reads = {path: path for path in PAGE_READS}
    reads |= {"/runs?limit=50": "/runs?limit=50", "/benchmarks": "/benchmarks", "/experiments": "/experiments",
              "/metrics": "/metrics", "/gpus": "/gpus", "/datasets": "/datasets", "/capture": "/capture",
              "/schedules": "/schedules"}  # fmt: skip
    runs = c.get("/runs", params={"limit": 200}).json()
    newest = {r["kind"]: r["id"] for r in reversed(runs)}
    if "switch" in newest:
        reads["/runs/{switch}"] = f"/runs/{newest['switch']}"
    serving = [r["id"] for r in runs if r["kind"] == "serving" and r["outcome"] != "running"]
    if serving:
        reads["/runs/{serving}/metrics"] = f"/runs/{serving[0]}/metrics"
    if benches := c.get("/benchmarks", params={"limit": 1}).json():
        reads["/benchmarks/{id}"] = f"/benchmarks/{benches[0]['run_id']}"
    if exps := c.get("/experiments", params={"limit": 1}).json():
        reads["/experiments/{id}"] = f"/experiments/{exps[0]['run_id']}"
    return reads


def time_reads(c: httpx.Client, reads: dict[str, str], n: int) -> dict[str, Timing]:
    out = {}
    for label, path in reads.items():
        c.get(path)  # a first read fills what the daemon caches
        seen, code = [], 0
        for _ in range(n):
            began = time.perf_counter()
            r = c.get(path)
            seen.append(time.perf_counter() - began)
            code = r.status_code
        out[label] = Timing(_pct(seen, 50), _pct(seen, 99), max(seen) * 1000, code)
    return out


def page_loads(url: str, token: str, n: int) -> list[float]:
    """Seconds from navigation until the page's first reads have all answered and it shows the state."""
    from playwright.sync_api import sync_playwright

    loads = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        for _ in range(n + 1):  # the first warms the browser's own caches: not counted
            # bypass_csp: wait_for_function evaluates a string, which the page's CSP forbids
            context = browser.new_context(viewport={"width": 1366, "height": 900}, bypass_csp=True)
            page = context.new_page()
            page.on("dialog", lambda d: d.accept(token))
            answered: set[str] = set()

            def seen(response: Any, answered: set[str] = answered) -> None:
                path = response.url.split("://", 1)[1].split("/", 1)[1]
                if "/" + path in PAGE_READS:
                    answered.add("/" + path)

            page.on("response", seen)
            began = time.perf_counter()
            page.goto(url + "/")
            while len(answered) < len(PAGE_READS):
                page.wait_for_event("response", timeout=60_000)
            page.wait_for_function("document.getElementById('state').textContent !== '…'")
            loads.append(time.perf_counter() - began)
            context.close()
        browser.close()
    return loads[1:]


def summary(loads: list[float]) -> str:
    return f"median {statistics.median(loads):.2f} s, max {max(loads):.2f} s (n={len(loads)})"
