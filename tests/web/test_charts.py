"""The page's charts (uPlot, served by the daemon) in real headless Chromium, with data from a sandbox run:
each draws on its canvas, has axis labels, and shows the value and the time (or level) under the mouse."""

from __future__ import annotations

from typing import Any

from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api
from tests.web.pages import errors_of, experiment
from tests.web.test_page import ARTIFACTS

CHARTS = {  # chart: (the y axis label it shows, what its legend's first value names)
    "chart-serving": ("tokens/s", "time"),
    "chart-load": ("seconds", "switch"),
    "chart-bench-tps": ("tok/s", "concurrency"),
    "chart-bench-ttft": ("ms", "concurrency"),
    "chart-bench-tpot": ("ms", "concurrency"),
    "chart-pareto": ("TPOT p95 ms", "output tok/s"),
}

DRAWN = """(id) => {
  const el = document.getElementById(id), canvas = el.querySelector('canvas');
  const img = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < img.length; i += 4) if (img[i] > 0) painted++;
  // uPlot draws axes on the canvas: their labels and the tick values it computed for this draw.
  const axes = K25Charts.get(id).axes.map((a) => [a.label || '', ...(a._values || [])].join(' '));
  return { painted, axes,
           labels: Array.from(el.querySelectorAll('.u-legend .u-series th')).map((t) => t.textContent) };
}"""
LEGEND = (
    "(id) => Array.from(document.querySelectorAll(`#${id} .u-legend .u-value`)).map((v) => v.textContent)"
)


def test_each_chart_draws_with_axes_and_shows_values_on_hover(
    page: Any, api: Api, sandbox: SandboxInfo
) -> None:
    experiment(api, ["vllm-eagle3", "baseline"], max_tokens=32)
    errors = errors_of(page)
    page.goto(sandbox.url + "/")
    page.wait_for_selector("#compare-table:not([hidden])", timeout=15000)
    page.wait_for_function(  # the serving chart has a few samples of the restored baseline
        "() => { const c = K25Charts.get('chart-serving'); return c && c.data[0].length >= 2; }",
        timeout=30000,
    )
    for chart, (axis, first) in CHARTS.items():
        drawn = page.evaluate(DRAWN, chart)
        print(chart, drawn)
        assert drawn["painted"] > 500, (chart, drawn)  # lines, bars and grid on the canvas
        assert any(axis in a for a in drawn["axes"]), (chart, drawn["axes"])
        assert any(any(c.isdigit() for c in a) for a in drawn["axes"]), (chart, drawn["axes"])  # tick values
        assert drawn["labels"][0] == first, (chart, drawn["labels"])
        page.locator(f"#{chart} .u-over").scroll_into_view_if_needed()
        box = page.locator(f"#{chart} .u-over").bounding_box()
        assert box is not None
        # Hover the middle of the plot: the legend names the time (or level) and each series' value there.
        for frac in (0.5, 0.25, 0.75, 0.1, 0.9):
            page.mouse.move(box["x"] + box["width"] * frac, box["y"] + box["height"] / 2)
            values = page.evaluate(LEGEND, chart)
            if (
                values
                and values[0] not in ("", "--", "\u2013")
                and any(any(c.isdigit() for c in v) for v in values[1:])
            ):
                break
        else:
            raise AssertionError(f"{chart}: hover shows no value: {values}")
        print(chart, "hover:", values)
    levels = page.evaluate("() => K25Charts.get('chart-bench-tps').series.slice(1).map((s) => s.label)")
    assert set(levels) == {"vllm-eagle3", "baseline"}
    # The Pareto chart: a point per profile and level at its throughput, a legend entry per profile; its
    # axes follow the selects.
    pareto = page.evaluate(
        "() => { const c = K25Charts.get('chart-pareto'); return { labels: c.series.slice(1).map((s) => s.label),"
        " xs: c.data[0], points: c.data.slice(1).map((ys) => ys.filter((y) => y != null).length) }; }"
    )
    print("pareto", pareto)
    assert set(pareto["labels"]) == {"vllm-eagle3", "baseline"}
    assert pareto["points"] == [2, 2]  # the experiment's two levels each
    assert all(x > 0 for x in pareto["xs"])
    page.select_option("#pareto-y", "median_ttft_ms")
    assert any("TTFT p50 ms" in a for a in page.evaluate(DRAWN, "chart-pareto")["axes"])
    page.mouse.move(0, 0)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "web-charts.png"), full_page=True)
    assert errors == []
