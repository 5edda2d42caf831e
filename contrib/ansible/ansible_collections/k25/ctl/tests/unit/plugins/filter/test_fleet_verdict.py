# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet_verdict filter, as ansible-test units runs a collection's own unit tests."""

from __future__ import annotations

import math

from ansible_collections.k25.ctl.plugins.filter.fleet_verdict import fleet_verdict


def _host(verdict, ratio, half=None):
    row = {"profile": "eagle", "verdict": verdict, "speedup": ratio}
    if half is not None:
        row["interval"] = [ratio * math.exp(-half), ratio * math.exp(half)]
    return {"results": [{"profile": "baseline", "verdict": "baseline", "speedup": 1.0}, row]}


def test_every_host_faster_is_a_fleet_faster():
    got = fleet_verdict({"a": _host("faster", 1.2), "b": _host("faster", 1.3)})["eagle"]
    assert got["verdict"] == "faster"
    assert got["fleet_interval"] is None


def test_a_host_planted_ten_percent_slower_is_named():
    got = fleet_verdict(
        {"a": _host("faster", 1.3, 0.03), "b": _host("faster", 1.31, 0.03), "c": _host("faster", 1.17, 0.03)}
    )["eagle"]
    assert [o["host"] for o in got["outliers"]] == ["c"]
    low, high = got["fleet_interval"]
    assert low < got["fleet_ratio"] < high


def test_no_host_is_named_where_the_others_disagree_with_each_other():
    # A stall moved healthy a's one benchmark 6% down: c, 10% below b, is within where a and b predict a host.
    seen = {"a": _host("faster", 2.49, 0.04), "b": _host("faster", 2.65, 0.006)}
    got = fleet_verdict(seen | {"c": _host("faster", 2.35, 0.025)})["eagle"]
    assert got["outliers"] == []
    assert "disagrees" not in got["text"]
