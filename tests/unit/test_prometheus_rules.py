"""The alert rules (contrib/prometheus/k25-ctl.rules.yml) with Prometheus's own tool: `promtool check rules`
(syntax, templates) and `promtool test rules` (each alert firing on one host and silent on another)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

RULES = ROOT / "contrib/prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.fail("promtool is missing: scripts/setup.sh installs Debian's prometheus")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=RULES, check=False)


def test_the_rules_pass_promtool_check() -> None:
    out = _promtool("check", "rules", "k25-ctl.rules.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 15 rules found" in out.stdout


def test_every_alert_fires_and_stays_silent_as_its_unit_tests_say() -> None:
    out = _promtool("test", "rules", "k25-ctl.rules.test.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    import yaml

    tests = yaml.safe_load((RULES / "k25-ctl.rules.test.yml").read_text())["tests"]
    rules = yaml.safe_load((RULES / "k25-ctl.rules.yml").read_text())["groups"][0]["rules"]
    firing = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a.get("exp_alerts")}
    assert firing == {r["alert"] for r in rules}  # every alert has a firing case (and h2 silent beside it)
    for rule in rules:
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
