"""The operator's fleet view: a real Prometheus (Debian's) scrapes the sandbox's daemon every second while
it switches, benchmarks and loses an engine; every query of the Grafana dashboard (contrib/grafana), with
`$host` set to the sandbox, returns data, and the alert rules (contrib/prometheus) load and evaluate."""

from __future__ import annotations

import json
import time
from pathlib import Path

from k25_sandbox.sandbox import SandboxInfo
from tests.conftest import ROOT
from tests.prometheus import prometheus, query
from tests.sandboxing import Api, inside
from tests.waiting import eventually_sync

DASHBOARD = ROOT / "contrib/grafana/k25-ctl.json"
SPEC = {"concurrency": [2], "num_prompts": 8, "max_tokens": 64, "warmups": 0}


def test_the_dashboard_is_importable() -> None:
    """The fields Grafana's import reads: a datasource input, the host variable over `instance`, and
    panels that each have a type, a place and Prometheus targets that use the variable."""
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "k25-ctl"
    assert dash["title"]
    assert isinstance(dash["schemaVersion"], int)
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    (host,) = dash["templating"]["list"]
    assert host["name"] == "host"
    assert "label_values(k25_host_state, instance)" in host["query"]["query"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) >= 12
    for p in dash["panels"]:
        assert p["type"], p
        assert p["title"], p
        assert {"x", "y", "w", "h"} <= set(p["gridPos"]), p
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}"
        for t in p["targets"]:
            assert t["refId"], (p["title"], t)
            assert 'instance=~"$host"' in t["expr"], (p["title"], t)


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    api: Api, sandbox: SandboxInfo, tmp_path: Path
) -> None:
    target = sandbox.url.removeprefix("http://")
    with prometheus(tmp_path, [sandbox.url], sandbox.token_file) as prom:
        eventually_sync(lambda: query(prom, 'up{job="k25-ctl"} == 1'), what="the first scrape", within_s=60)
        start = time.time()
        api.activate("vllm-eagle3")  # a switch: its load breakdown, a teardown, the downtime
        for _ in range(2):  # traffic: tokens/s, acceptance; the second against the first (relative)
            r = api.client.post("/benchmarks", json=SPEC)
            assert r.status_code == 202, r.text
            assert api.wait_run(r.json()["run_id"])["outcome"] == "ok"
        api.activate("baseline")
        serving = api.wait_until(lambda: api.status()["serving_run_id"], what="serving")
        assert (
            inside(sandbox, "systemctl", "kill", "-s", "KILL", "vllm-kimi-k25-int4.service").returncode == 0
        )
        crashed = api.wait_run(serving)
        # the default profile restarts (its budget)
        assert crashed["outcome"] == "crashed", (crashed["error"], [e["detail"] for e in crashed["events"]])
        api.wait_until(lambda: api.status()["state"] == "active", within_s=60, what="restarted")
        eventually_sync(
            lambda: query(prom, 'k25_runs_total{kind="serving",outcome="crashed"} > 0')
            and query(prom, "k25_restart_budget_remaining"),
            what="Prometheus saw the crash and the restart", within_s=30,
        )  # fmt: skip
        end = time.time()
        empty = []
        dashboard = json.loads(DASHBOARD.read_text())
        for panel in dashboard["panels"]:
            for t in panel["targets"]:
                expr = t["expr"].replace("$host", target).replace("$__rate_interval", "5s")
                body = prom.get("/api/v1/query_range",
                                params={"query": expr, "start": start, "end": end, "step": "1s"}).json()  # fmt: skip
                assert body["status"] == "success", (panel["title"], expr, body)
                series = body["data"]["result"]
                print(f"{panel['title']:55} {len(series):3} series  {expr}")
                if not series:
                    empty.append((panel["title"], expr))
        assert empty == [], empty
        groups = prom.get("/api/v1/rules").json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == 15, rules
        assert all(r["health"] == "ok" for r in rules), rules
        firing = {a["labels"]["alertname"] for r in rules for a in r.get("alerts", [])}
        print(f"alerts pending or firing: {sorted(firing)}")
        assert "K25EngineCrashed" in firing  # the crash above, seen through the rules
