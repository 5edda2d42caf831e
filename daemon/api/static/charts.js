// The page's charts, drawn with uPlot (vendored: static/vendor/uplot). Each chart is made once and given
// new data as it comes; hovering shows the time (or level) and every series' value in the legend.
"use strict";

const K25Charts = (() => {
  const AXIS = { stroke: "#8b98a5", grid: { stroke: "#2d333b", width: 1 }, ticks: { stroke: "#2d333b" } };
  const COLORS = ["#3fb950", "#58a6ff", "#d29922", "#db61a2", "#8957e5", "#3fb9a0", "#f85149", "#6e7681"];
  const STAGE_COLORS = { warm: "#8957e5", wake: "#db61a2", weights: "#d29922", compile: "#58a6ff",
                         graphs: "#3fb9a0", kv_cache_warmup: "#3fb950", other: "#6e7681" };
  const made = {};  // chart id -> {plot, key}: remade only when its series change

  function width(el) { return Math.max(240, el.clientWidth || el.parentElement.clientWidth || 600); }

  // A chart with these options in element `id`, made again only when `key` (its series) changes.
  function draw(id, key, opts, data) {
    const el = document.getElementById(id);
    const have = made[id];
    if (have && have.key === key) {
      have.plot.setData(data);
      return have.plot;
    }
    if (have) have.plot.destroy();
    const plot = new uPlot(Object.assign({ width: width(el), height: opts.height || 180 }, opts), data, el);
    made[id] = { plot, key };
    return plot;
  }

  function fixed(digits) { return (u, v) => (v == null ? "–" : v.toFixed(digits)); }

  // Tokens/s (left axis) and acceptance length (right axis) over time: minute rows, then live samples.
  function serving(id, points) {
    const data = [points.map((p) => p.t), points.map((p) => p.tps), points.map((p) => p.acc)];
    return draw(id, "serving", {
      height: 170,
      series: [
        { label: "time" },
        { label: "tokens/s", stroke: COLORS[0], width: 1.5, value: fixed(1), scale: "tps" },
        { label: "acceptance length", stroke: COLORS[1], width: 1.5, value: fixed(2), scale: "acc" },
      ],
      axes: [
        Object.assign({}, AXIS),
        Object.assign({}, AXIS, { scale: "tps", label: "tokens/s", labelSize: 18, size: 50 }),
        Object.assign({}, AXIS, { scale: "acc", side: 1, label: "accept length", labelSize: 18, size: 50,
                                  grid: { show: false } }),
      ],
      scales: { x: { time: true, range: (u, lo, hi) => (hi - lo < 60 ? [hi - 60, hi] : [lo, hi]) }, tps: { range: (u, lo, hi) => [0, Math.max(1, hi) * 1.1] },
                acc: { range: (u, lo, hi) => [0, Math.max(1.5, hi || 0) * 1.1] } },
    }, data);
  }

  // Stacked bars: one bar per switch run, one piece per load stage (the legend shows each piece's seconds).
  function loads(id, runs) {
    const stages = [...new Set(runs.flatMap((r) => r.parts.map((p) => p.stage)))];
    const raw = stages.map((s) => runs.map((r) => (r.parts.find((p) => p.stage === s) || { seconds: 0 }).seconds));
    const stacked = raw.map((_, i) => runs.map((r, j) => raw.slice(0, i + 1).reduce((a, row) => a + row[j], 0)));
    const xs = runs.map((_, j) => j);
    const bars = uPlot.paths.bars({ size: [0.6, 40] });
    // Drawn from the tallest (the sum) down, each piece over the one before: a stack.
    const order = stages.map((_, i) => stages.length - 1 - i);
    return draw(id, "loads:" + stages.join(","), {
      height: 170,
      series: [
        { label: "switch", value: (u, v) => (v == null ? "–" : `run ${runs[v].id} (${runs[v].profile})`) },
        ...order.map((i) => ({
          label: stages[i], stroke: STAGE_COLORS[stages[i]] || COLORS[i % COLORS.length],
          fill: STAGE_COLORS[stages[i]] || COLORS[i % COLORS.length], paths: bars, points: { show: false },
          value: (u, v, si, di) => (di == null ? "–" : raw[i][di].toFixed(1) + " s"),
        })),
      ],
      axes: [
        Object.assign({}, AXIS, { values: (u, ticks) => ticks.map((t) => (runs[t] ? "run " + runs[t].id : "")),
                                  incrs: [1] }),
        Object.assign({}, AXIS, { label: "seconds", labelSize: 18, size: 50 }),
      ],
      scales: { x: { time: false, range: [-0.5, Math.max(0.5, runs.length - 0.5)] },
                y: { range: (u, lo, hi) => [0, Math.max(1, hi) * 1.1] } },
    }, [xs, ...order.map((i) => stacked[i])]);
  }

  // One line per profile over the benchmark's levels (concurrency, or request rate where set).
  function levels(id, rows, key, unit, digits) {
    const xs = [...new Set(rows.flatMap((r) => r.levels.map(level)))].sort((a, b) => a - b);
    const series = rows.map((r) => xs.map((x) => {
      const lv = r.levels.find((l) => level(l) === x);
      return lv && lv[key] != null ? lv[key] : null;
    }));
    const byRate = rows.some((r) => r.levels.some((l) => l.request_rate != null && l.request_rate !== "inf"));
    return draw(id, "levels:" + rows.map((r) => r.profile).join(","), {
      height: 180,
      series: [
        { label: byRate ? "req/s" : "concurrency" },
        ...rows.map((r, i) => ({ label: r.profile, stroke: COLORS[i % COLORS.length], width: 1.5,
                                 points: { size: 6 }, value: (u, v) => (v == null ? "–" : v.toFixed(digits) + " " + unit) })),
      ],
      axes: [
        Object.assign({}, AXIS, { label: byRate ? "request rate" : "concurrency", labelSize: 18 },
                      byRate ? {} : { incrs: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512] }),
        Object.assign({}, AXIS, { label: unit, labelSize: 18, size: 55 }),
      ],
      scales: { x: { time: false, range: (u, lo, hi) => (lo === hi ? [lo - 1, hi + 1] : [lo, hi]) },
                y: { range: (u, lo, hi) => [0, Math.max(1e-6, hi) * 1.15] } },
    }, [xs, ...series]);
  }

  // A sweep's metric against one axis's values: one line per combination of the other axes' values, each
  // point with a whisker of +- one standard deviation of its repeats (drawn on the canvas after the lines).
  function sweep(id, axis, lines, unit, digits) {
    const xs = [...new Set(lines.flatMap((l) => l.points.map((p) => p.x)))].sort((a, b) => a - b);
    const at = (l, x) => l.points.find((p) => p.x === x);
    const data = [xs, ...lines.map((l) => xs.map((x) => (at(l, x) ? at(l, x).y : null)))];
    const whiskers = (u) => {
      const ctx = u.ctx;
      ctx.save();
      ctx.lineWidth = 1.5 * devicePixelRatio;
      lines.forEach((l, i) => {
        ctx.strokeStyle = COLORS[i % COLORS.length];
        for (const p of l.points) {
          if (!p.sd) continue;
          const cx = u.valToPos(p.x, "x", true), w = 4 * devicePixelRatio;
          const lo = u.valToPos(p.y - p.sd, "y", true), hi = u.valToPos(p.y + p.sd, "y", true);
          ctx.beginPath();
          ctx.moveTo(cx, lo); ctx.lineTo(cx, hi);
          ctx.moveTo(cx - w, lo); ctx.lineTo(cx + w, lo);
          ctx.moveTo(cx - w, hi); ctx.lineTo(cx + w, hi);
          ctx.stroke();
        }
      });
      ctx.restore();
    };
    return draw(id, "sweep:" + axis + ":" + lines.map((l) => l.label).join(","), {
      height: 180,
      series: [
        { label: axis },
        ...lines.map((l, i) => ({ label: l.label, stroke: COLORS[i % COLORS.length], width: 1.5, points: { size: 7 },
                                  value: (u, v) => (v == null ? "–" : v.toFixed(digits) + " " + unit) })),
      ],
      axes: [
        Object.assign({}, AXIS, { label: axis, labelSize: 18 }),
        Object.assign({}, AXIS, { label: unit, labelSize: 18, size: 55 }),
      ],
      scales: { x: { time: false, range: (u, lo, hi) => (lo === hi ? [lo - 1, hi + 1] : [lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05]) },
                y: { range: (u, lo, hi) => [0, Math.max(1e-6, hi) * 1.2] } },
      hooks: { draw: [whiskers] },
    }, data);
  }

  // Pareto: per profile, a latency (y) against a throughput (x) over its levels, each level a point; a
  // profile's line joins its own points (spanGaps: the x values are the union of every profile's).
  function pareto(id, rows, xKey, yKey, xUnit, yUnit) {
    const pts = rows.map((r) => r.levels.filter((l) => l[xKey] != null && l[yKey] != null)
      .map((l) => [Number(l[xKey]), Number(l[yKey])]));
    const xs = [...new Set(pts.flat().map((p) => p[0]))].sort((a, b) => a - b);
    const series = pts.map((ps) => xs.map((x) => { const p = ps.find((q) => q[0] === x); return p ? p[1] : null; }));
    return draw(id, "pareto:" + xKey + ":" + yKey + ":" + rows.map((r) => r.profile).join(","), {
      height: 200,
      series: [
        { label: xUnit, value: (u, v) => (v == null ? "–" : v.toFixed(2)) },
        ...rows.map((r, i) => ({ label: r.profile, stroke: COLORS[i % COLORS.length], width: 1.5, spanGaps: true,
                                 points: { show: true, size: 7 }, value: (u, v) => (v == null ? "–" : v.toFixed(1) + " " + yUnit) })),
      ],
      axes: [
        Object.assign({}, AXIS, { label: xUnit, labelSize: 18 }),
        Object.assign({}, AXIS, { label: yUnit, labelSize: 18, size: 55 }),
      ],
      scales: { x: { time: false, range: (u, lo, hi) => (lo === hi ? [lo - 1, hi + 1] : [lo - (hi - lo) * 0.05, hi + (hi - lo) * 0.05]) },
                y: { range: (u, lo, hi) => [0, Math.max(1e-6, hi) * 1.15] } },
    }, [xs, ...series]);
  }

  function level(l) {
    return l.request_rate != null && l.request_rate !== "inf" ? Number(l.request_rate) : Number(l.max_concurrency);
  }

  function get(id) { return made[id] ? made[id].plot : null; }

  window.addEventListener("resize", () => {
    for (const id of Object.keys(made)) {
      const el = document.getElementById(id);
      made[id].plot.setSize({ width: width(el), height: made[id].plot.height });
    }
  });

  return { serving, loads, levels, sweep, pareto, get };
})();
