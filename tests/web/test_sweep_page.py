"""A sweep on the page, in real headless Chromium under the page's own CSP: a chart per axis (the metric
against the axis's values, whiskers from the repeats), the best variant marked with its recommendation,
and the acceptance length predicted for fewer drafted tokens beside the measured one."""

from __future__ import annotations

from typing import Any

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api
from tests.web.pages import errors_of
from tests.web.test_charts import DRAWN, LEGEND
from tests.web.test_page import ARTIFACTS


def test_the_newest_sweep_is_charted_per_axis_with_its_best(
    strict_page: Any, api: Api, sandbox: SandboxInfo
) -> None:
    page = strict_page
    api.activate("baseline")
    body = {"profiles": ["drafty"], "vary": {"spec-tokens": [1, 2], "draft-cost": [0.25, 1.0]}, "repeats": 2,
            "benchmark": {"concurrency": [1], "num_prompts": 2, "max_tokens": 128, "warmups": 0}}  # fmt: skip
    r = api.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    exp_id = r.json()["run_id"]
    assert api.wait_run(exp_id, within_s=300)["outcome"] == "ok"
    errors = errors_of(page)
    page.goto(sandbox.url + "/")
    page.wait_for_selector("#sweep-card:not([hidden])", timeout=15000)
    page.wait_for_function("() => K25Charts.get('chart-sweep-1') !== null", timeout=15000)
    assert f"experiment {exp_id} over drafty" in page.inner_text("#sweep-meta")
    sweep = api.client.get(f"/experiments/{exp_id}/sweep").json()
    assert sweep["best"].endswith(",draft-cost=0.25"), sweep  # drafting at 1.0 costs more than it gains
    best = page.inner_text("#sweep-best")
    assert best.startswith(f"best: {sweep['best']}:"), best
    assert "noise band ±" in best
    for i, axis in enumerate(("spec-tokens", "draft-cost")):
        chart = f"chart-sweep-{i}"
        drawn = page.evaluate(DRAWN, chart)
        print(chart, drawn)
        assert drawn["painted"] > 500, drawn
        assert drawn["labels"][0] == axis
        lines = page.evaluate(f"() => K25Charts.get('{chart}').series.slice(1).map((s) => s.label)")
        assert len(lines) == 2, lines  # one per value of the other axis
        page.locator(f"#{chart} .u-over").scroll_into_view_if_needed()
        box = page.locator(f"#{chart} .u-over").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.05, box["y"] + box["height"] / 2)  # the first value
        values = page.evaluate(LEGEND, chart)
        assert any("tok/s" in v for v in values), values
    # A refresh that brings nothing new (the page refreshes on every host event) keeps the charts as they
    # are: redrawn, they would lose the hover an operator is reading (and the element a test points at).
    page.evaluate("document.getElementById('chart-sweep-0').dataset.kept = 'yes'")
    page.evaluate("refresh()")
    assert page.evaluate("document.getElementById('chart-sweep-0').dataset.kept") == "yes"
    rows = page.locator("#sweep tr")
    assert rows.count() == 5  # the base and 4 variants
    assert page.locator("#sweep tr.best").inner_text().startswith(f"★ {sweep['best']}")
    # The base drafted 3 tokens: its per-position rates predict k=1 and k=2; the variants measured them.
    predicted = page.inner_text("#sweep-predicted")
    assert "at k=1 the acceptance length would be ~1.8" in predicted, predicted
    one = page.locator("#sweep tr", has_text="spec-tokens=1,draft-cost=0.25").inner_text().split("\t")
    assert abs(float(one[-1]) - float(one[-2])) < 0.06, one  # predicted beside measured (only k differs)
    other = page.locator("#sweep tr", has_text="spec-tokens=1,draft-cost=1.0").inner_text().split("\t")
    assert other[-1] == "\u2013", other  # the drafting cost differs too: no prediction
    page.mouse.move(0, 0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#sweep-card").screenshot(path=str(ARTIFACTS / "web-sweep.png"))
    assert errors == []
