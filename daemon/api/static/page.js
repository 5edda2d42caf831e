"use strict";
const $ = (id) => document.getElementById(id);
// Every server string that goes into markup passes through esc (numbers through fmt): profile files, unit
// names and error texts are the operator's or an engine's words, never markup.
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&":"&amp;","<":"&lt;",">":"&gt;",'"':"&quot;","'":"&#39;"}[c]));
let status = null;

function toast(msg) { const t = $("toast"); t.textContent = msg; t.style.display = "block"; setTimeout(() => t.style.display = "none", 6000); }

function token() {
  let t = sessionStorage.getItem("k25-token");
  if (!t) { t = window.prompt("k25-ctl token (from /etc/k25-ctl/token):"); if (t) sessionStorage.setItem("k25-token", t.trim()); }
  return t ? t.trim() : null;
}

function authHeaders() {
  const t = sessionStorage.getItem("k25-token");
  return t ? {"Authorization": "Bearer " + t} : {};
}

async function api(path, opts = {}, retried = false) {
  const used = sessionStorage.getItem("k25-token");
  const headers = Object.assign({}, opts.headers || {}, authHeaders());
  const r = await fetch(path, Object.assign({}, opts, {headers}));
  const body = await r.json().catch(() => ({}));
  if (r.status === 401 && !retried) {  // reads may need the token too (reads_require_token)
    const now = sessionStorage.getItem("k25-token");
    if (now && now !== used) return api(path, opts, true);  // another request asked meanwhile
    sessionStorage.removeItem("k25-token");
    if (token()) return api(path, opts, true);
  }
  if (!r.ok) throw new Error(body.detail || ("HTTP " + r.status));
  return body;
}

async function mutate(path) {
  if (!token()) return;
  try { await api(path, {method: "POST"}); await refresh(); } catch (e) { toast(e.message); }
}

function renderStatus(st) {
  status = st;
  const badge = $("state");
  badge.textContent = st.state; badge.className = "badge s-" + st.state;
  $("active-profile").textContent = st.active_profile || "–";
  $("reason").textContent = (st.reason || "") + ((st.conflicts || []).length ? `  CONFLICT: ${st.conflicts.join(", ")} also running` : "")
    + (st.warnings || []).map((w) => `  WARNING: ${w}`).join("");
  const card = $("switch-card");
  card.hidden = st.state !== "switching";
  if (st.state === "switching") {
    $("switch-run").textContent = st.run_id; $("switch-target").textContent = st.target_profile;
    $("switch-phase").textContent = (st.phase || "") + (st.phase_detail ? ` (${st.phase_detail})` : "");
    const pct = st.progress_percent ?? 0;
    $("progress-bar").style.width = pct + "%";
    $("progress-text").textContent = st.progress_percent == null ? "" : `loading ${pct}% (${st.progress_done}/${st.progress_total})`;
  }
  $("job").textContent = st.job ? `in progress: ${st.job}` : "";
  $("parked").textContent = (st.parked || []).map((p) => `parked: ${p.profile} since ${new Date(p.since * 1000).toLocaleTimeString()}`
    + ` (${Object.values(p.gpu_mib).reduce((a, b) => a + b, 0)} MiB GPU, ${(p.host_ram_bytes / 2 ** 30).toFixed(1)} GiB RAM)`).join("; ");
  const budget = st.park_budget;
  $("park-budget").textContent = budget ? `park RAM budget: ${size(budget.used_bytes)} pinned of ${size(budget.budget_bytes)}` : "";
  const held = st.ram_held || [];
  $("ram-held").textContent = held.length ? "host RAM: " + held.map((h) => `${h.profile}${h.parked ? " (parked)" : ""} ${size(h.bytes)}`).join(", ") : "";
  document.querySelectorAll("button[data-activate]").forEach((b) => b.disabled = st.state === "switching");
}

function renderGpus(gpus, health) {
  const of = Object.fromEntries((health || []).map((h) => [h.index, h]));
  $("gpus").innerHTML = gpus.map((g) => {
    const pct = g.memory_total_mib ? Math.round(100 * g.memory_used_mib / g.memory_total_mib) : 0;
    const h = of[g.index] || {state: "healthy", reasons: []};
    const why = h.reasons.length ? `<div class="mute">${h.reasons.map(esc).join("; ")}</div>` : "";
    return `<tr data-gpu="${g.index}"><td>${g.index}</td><td>${esc(g.name)}</td><td><div class="bar mem"><div data-w="${pct}"></div></div>
      <span class="mute">${(g.memory_used_mib/1024).toFixed(1)} / ${(g.memory_total_mib/1024).toFixed(0)} GiB</span></td>
      <td>${esc(g.utilization_pct ?? "–")}%</td><td>${g.power_w == null ? "–" : fmt(g.power_w, 0) + " W"}</td>
      <td class="gpu-health h-${esc(h.state)}">${esc(h.state.replace("_", " "))}${why}</td></tr>`;
  }).join("") || `<tr><td colspan="6" class="mute">no GPU found</td></tr>`;
  widths($("gpus"));
}

function renderHost(h) {
  const r = h.rates;
  const when = r.measured_at ? `calibrated ${new Date(r.measured_at).toLocaleString()}` : "documented defaults (never calibrated: k25-ctl host calibrate)";
  $("host-rates").textContent = `pinning ${fmt(r.pin_process_registered, 1)} GiB/s per process (registered), ${fmt(r.pin_host_registered, 1)} host-wide; copy ${fmt(r.device_to_host, 1)}; page cache ${fmt(r.page_cache, 1)}; disk ${fmt(r.disk, 1)}: ${when}`;
  $("park-ways").innerHTML = h.parking.flatMap((p) => p.ways.map((w, i) => `<tr><td>${i ? "" : `<b>${esc(p.profile)}</b> <span class="mute">${size(p.weight_bytes)}, ${fmt(100 * p.resident, 0)}% cached</span>`}</td>
    <td>${esc(w.name)}</td><td>${fmt(w.park_s, 1)}</td><td>${fmt(w.wake_s, 1)}</td><td>${size(w.ram_bytes)}</td></tr>`)).join("") || '<tr><td colspan="5" class="mute">no profile parks</td></tr>';
}

// Widths given as data-w (percent) become the elements' style through the CSSOM, which a CSP allows.
function widths(root) { root.querySelectorAll("[data-w]").forEach((e) => { e.style.width = e.dataset.w + "%"; }); }

function renderProfiles(items) {
  $("profiles").innerHTML = items.map((p) => p.valid
    ? `<tr><td><b>${esc(p.name)}</b>${p.default ? ' <span class="mute">(default)</span>' : ""}${p.parked ? ' <span class="badge s-idle">parked</span>' : ""}<div class="mute">${esc(p.description)}</div></td>
        <td class="engine-installed">${esc(p.engine)}${p.engine_version ? ` ${esc(p.engine_version)}` : ""}${p.engine_package && p.engine_package !== p.engine ? ` <span class="mute">(${esc(p.engine_package)})</span>` : ""}${(p.engine_notes || []).length ? ` <span class="mute" title="${esc(p.engine_notes.join("\n"))}">(${p.engine_notes.length} note${p.engine_notes.length > 1 ? "s" : ""})</span>` : ""}</td><td class="mute">${esc(p.unit)}</td><td>${esc((p.unit_state || {}).active_state || "?")}</td>
        <td>${residency(p)}</td>
        <td><button data-activate="${esc(p.name)}">Activate</button> <button data-warm="${esc(p.name)}" title="read its weights into the page cache">Warm</button>${p.parked ? ` <button data-unpark="${esc(p.name)}" title="stop the parked engine: frees its host RAM and GPU memory">Unpark</button>` : ""}</td></tr>`
    : `<tr><td>${esc(p.name)}</td><td colspan="5" class="o-failed">invalid: ${esc(p.error)}</td></tr>`).join("");
  widths($("profiles"));
  document.querySelectorAll("button[data-warm]").forEach((b) => b.onclick = () => mutate(`/profiles/${encodeURIComponent(b.dataset.warm)}/warm`));
  document.querySelectorAll("button[data-unpark]").forEach((b) => b.onclick = () => mutate(`/profiles/${encodeURIComponent(b.dataset.unpark)}/unpark`));
  document.querySelectorAll("button[data-activate]").forEach((b) => {
    b.onclick = () => mutate(`/profiles/${encodeURIComponent(b.dataset.activate)}/activate`);
    b.disabled = status && status.state === "switching";
  });
}

// A profile's weight files in the page cache: a bar with the share and the size.
function residency(p) {
  const r = p.residency;
  if (!r) return '<span class="mute">–</span>';
  const gib = (r.bytes / 2 ** 30).toFixed(r.bytes < 2 ** 30 ? 2 : 0);
  return `<div class="bar res" data-profile="${esc(p.name)}" data-percent="${r.percent.toFixed(1)}" title="${r.files} files, scanned in ${(r.scan_s * 1000).toFixed(0)} ms"><div data-w="${r.percent.toFixed(1)}"></div></div>
    <span class="mute">${r.percent.toFixed(0)}% of ${gib} GiB${p.warm !== "off" ? ` (warm ${esc(p.warm)})` : ""}</span>`;
}

// A switch's load as stacked pieces (warm, weights, compile, graphs, KV cache/warm-up, other).
function breakdown(r) {
  const parts = r.load_breakdown || [];
  const total = parts.reduce((a, b) => a + b.seconds, 0);
  if (!total) return r.load_seconds == null ? "–" : r.load_seconds.toFixed(1) + " s";
  return `<div class="stack" data-run="${r.id}" title="${esc(parts.map((b) => `${b.stage} ${b.seconds.toFixed(1)} s`).join(", "))}">${parts.map((b) =>
    `<div class="st-${esc(b.stage)}" data-stage="${esc(b.stage)}" data-w="${(100 * b.seconds / total).toFixed(1)}"></div>`).join("")}</div>
    <span class="mute">${total.toFixed(1)} s</span>`;
}

// What a switch cost the clients: out of the balancer's rotation, the drain, requests cut at the stop.
function cost(c) {
  if (!c) return "";
  const parts = [];
  if (c.downtime_s != null) parts.push(`out ${c.downtime_s.toFixed(1)} s`);
  if (c.drain_s != null) parts.push(`drained ${c.drain_s.toFixed(1)} s${c.drain_timed_out ? " (timed out)" : ""}`);
  else if (c.drain_cut != null) parts.push("not drained");
  if (c.drain_cut != null) parts.push(`${c.drain_cut} cut`);
  return esc(parts.join(", "));
}

function seconds(a, b) { return b ? ((new Date(b) - new Date(a)) / 1000).toFixed(1) + " s" : "–"; }

function renderRuns(runs) {
  $("runs").innerHTML = runs.map((r) => `<tr>
    <td><a href="#" data-run="${r.id}">${r.id}</a>${r.parent_id ? ` <span class="mute">(of ${r.parent_id})</span>` : ""}</td>
    <td>${esc(r.kind)}</td><td>${esc(r.profile || "–")}</td><td class="o-${esc(r.outcome)}">${esc(r.outcome)}</td>
    <td class="mute">${esc(r.started_at.slice(0, 19).replace("T", " "))}</td><td>${seconds(r.started_at, r.ended_at)}</td>
    <td>${breakdown(r)}</td><td class="cost">${cost(r.switch_cost)}</td>
    <td>${r.error ? `<pre>${esc(r.error)}</pre>` : ""}</td></tr>`).join("") || `<tr><td colspan="9" class="mute">no runs yet</td></tr>`;
  document.querySelectorAll("a[data-run]").forEach((a) => a.onclick = (ev) => { ev.preventDefault(); showRun(a.dataset.run); });
  widths($("runs"));
  const loaded = runs.filter((r) => (r.load_breakdown || []).length).reverse()
    .map((r) => ({ id: r.id, profile: r.profile, parts: r.load_breakdown }));
  $("chart-load").hidden = !loaded.length;
  if (loaded.length) K25Charts.loads("chart-load", loaded);
}

async function showRun(id) {
  const r = await api(`/runs/${encodeURIComponent(id)}`);
  const td = (r.teardowns || []).map((t) => {
    const rep = t.report;
    const procs = (rep.processes || []).map((p) => `${p.pid} ${esc(p.title)} — ${esc((p.signals || []).join("+") || "none")} → ${esc(p.outcome)}`).join("\n") || "no process to stop";
    return `<h2>Teardown ${t.id} (${t.ok ? "clean" : "NOT clean"})</h2><pre>${procs}\nshm removed: ${esc((rep.shm_removed || []).join(", ") || "none")}\nsteps: ${esc(JSON.stringify(rep.steps))}</pre>`;
  }).join("");
  const events = r.events.map((e) => `${e.at.slice(11, 23)} ${e.phase.padEnd(9)} ${e.detail}`).join("\n");
  $("run-detail").innerHTML = `<h2>Run ${r.id}: ${esc(r.kind)} → ${esc(r.profile)} (${esc(r.outcome)})</h2>
    <pre>${esc((r.argv || []).join(" "))}</pre><pre>${esc(events)}</pre>${td}`;
}

function size(n) { return n >= 2 ** 30 / 10 ? `${(n / 2 ** 30).toFixed(1)} GiB` : `${(n / 2 ** 20).toFixed(1)} MiB`; }
function fmt(v, digits) { return v == null ? "–" : Number(v).toFixed(digits); }

// The serving run's minute rows, then the live samples newer than the last row (seconds since the epoch).
function servingPoints(m) {
  const rows = m.rows.map((r) => ({ t: new Date(r.at).getTime() / 1000, tps: r.tokens_per_s, acc: r.acceptance_length }));
  const last = rows.length ? rows[rows.length - 1].t : 0;
  const live = m.live.filter((x) => x.at > last).map((x) => ({ t: x.at, tps: x.tokens_per_s, acc: x.acceptance_length }));
  return rows.concat(live);
}

async function refreshServing() {
  const card = $("serving-card");
  const sv = status && status.serving;
  card.hidden = !sv;
  if (!sv) return;
  $("serving-profile").textContent = sv.profile;
  $("serving-meta").textContent = `run ${sv.run_id}, ${fmt(sv.served_s / 60, 1)} min`;
  $("serving-tps").textContent = fmt(sv.tokens_per_s, 1);
  $("serving-acc").textContent = fmt(sv.acceptance_length, 2);
  $("serving-running").textContent = fmt(sv.running, 0);
  try {
    const m = await api(`/runs/${sv.run_id}/metrics`);
    K25Charts.serving("chart-serving", servingPoints(m));
  } catch (e) { /* the run may just have ended */ }
}

// Horizontal bars, one per profile; each bar and value links to the benchmark run behind it.
function bars(id, rows, key, digits) {
  const shown = rows.filter((r) => r[key] != null);
  const max = Math.max(1e-9, ...shown.map((r) => r[key])), h = 100 / Math.max(1, shown.length);
  $(id).innerHTML = shown.map((r, i) => `<a href="/benchmarks/${r.run_ids[0]}"><rect data-profile="${esc(r.profile)}" x="90" y="${(i * h + 2).toFixed(1)}" height="${(h - 4).toFixed(1)}" width="${(280 * r[key] / max).toFixed(1)}"></rect>
    <text x="2" y="${(i * h + h / 2 + 3).toFixed(1)}">${esc(r.profile)}</text><text x="${(94 + 280 * r[key] / max).toFixed(1)}" y="${(i * h + h / 2 + 3).toFixed(1)}">${fmt(r[key], digits)}</text></a>`).join("");
}

function renderCompare(cmp) {
  const has = cmp.rows.length > 0;
  $("benchmarks").hidden = has; $("bench-charts").hidden = !has; $("compare-table").hidden = !has;
  $("bench-meta").textContent = has ? `${cmp.metric}; spec ${cmp.spec_hash}, ${cmp.gpu_key || "GPUs unknown"}` : "";
  $("compare-notes").textContent = cmp.notes.join(" · ");
  if (!has) return;
  K25Charts.levels("chart-bench-tps", cmp.rows, "output_throughput", "tok/s", 1);
  K25Charts.levels("chart-bench-ttft", cmp.rows, "median_ttft_ms", "ms", 1);
  K25Charts.levels("chart-bench-tpot", cmp.rows, "median_tpot_ms", "ms", 2);
  bars("chart-bench-acc", cmp.rows, "acceptance_length", 2);
  paretoChart(cmp);
  const link = (r, text) => `<a href="/benchmarks/${r.run_ids[0]}" title="runs ${r.run_ids.join(", ")}: provenance and levels">${text}</a>`;
  $("compare").innerHTML = cmp.rows.map((r) => `<tr data-profile="${esc(r.profile)}"><td>${esc(r.profile)}</td>
    <td>${link(r, fmt(r.output_throughput, 1))}${r.throughput_cv != null ? ` <span class="mute">±${fmt(100 * r.throughput_cv, 1)}%</span>` : ""}</td>
    <td>${r.speedup == null ? "–" : link(r, fmt(r.speedup, 2) + "x")}</td>
    <td class="verdict v-${esc((r.verdict || "").split(" ")[0])}">${r.verdict_text ? esc(r.verdict_text) : esc(r.verdict || "–") + (r.noise != null && r.verdict !== "baseline" ? ` <span class="mute">(noise ${fmt(100 * r.noise, 0)}%)</span>` : "")}</td>
    <td>${fmt(r.latency_ms.ttft.median, 1)}</td><td>${fmt(r.latency_ms.tpot.median, 2)}</td><td>${fmt(r.latency_ms.itl.p99, 2)}</td>
    <td>${fmt(r.acceptance_length, 2)}${predictions(r.predicted_length)}</td><td>${fmt(r.acceptance_rate, 3)}</td>
    <td class="mute">${esc(r.provenance.engine || "")} ${esc(r.provenance.engine_version || "")}</td></tr>`).join("");
}

// The Pareto chart with the axes chosen in its two selects (drawn again when one changes).
let lastCompare = null;
function paretoChart(cmp) {
  lastCompare = cmp;
  const x = $("pareto-x"), y = $("pareto-y");
  K25Charts.pareto("chart-pareto", cmp.rows, x.value, y.value, x.selectedOptions[0].text, y.selectedOptions[0].text + " ms");
}
for (const id of ["pareto-x", "pareto-y"]) $(id).addEventListener("change", () => lastCompare && paretoChart(lastCompare));

// What fewer drafted tokens would give, from the per-position acceptance rates (compare.predicted_lengths).
function predictions(byK) {
  const ks = Object.keys(byK || {});
  if (!ks.length) return "";
  return `<div class="mute predicted">${ks.map((k) => `at k=${esc(k)} the acceptance length would be ~${fmt(byK[k], 2)}`).join("; ")}</div>`;
}

// The newest sweep: a chart per axis (its metric against the axis's values, a line per combination of the
// others, whiskers from the repeats), the recommendation, and predicted against measured acceptance.
let shownSweep = null;
async function refreshSweep(experiments) {
  const exp = experiments.find((e) => (e.request.variants || []).length);
  $("sweep-card").hidden = !exp;
  if (!exp) return;
  const r = await api(`/experiments/${exp.run_id}/sweep`);
  const seen = JSON.stringify(r);
  if (seen === shownSweep) return;  // redrawn only when it changed: a chart being read keeps its hover
  shownSweep = seen;
  $("sweep-meta").textContent = `experiment ${r.experiment_run_id} over ${r.base}: ${r.metric}`;
  $("sweep-best").textContent = r.recommendation ? `best: ${r.recommendation}` + (r.promote ? ` · to keep it: ${r.promote}` : "") : r.notes.join(" · ");
  $("sweep-predicted").innerHTML = predictions(r.predicted).replace("<div", `<div title="from ${esc(r.base)}'s per-position acceptance rates"`);
  const rows = r.rows.filter((x) => x.value != null && Object.keys(x.values).length);
  const unit = r.metric.split("(")[1] ? r.metric.split("(")[1].split(")")[0] : "";
  $("sweep-charts").innerHTML = r.axes.map((a, i) => `<div><h2>${esc(r.metric)} by ${esc(a)}</h2><div id="chart-sweep-${i}" class="uchart"></div></div>`).join("");
  r.axes.forEach((axis, i) => {
    const groups = {};
    for (const x of rows) {
      const rest = r.axes.filter((b) => b !== axis).map((b) => `${b}=${x.values[b]}`).join(", ") || r.base;
      (groups[rest] = groups[rest] || []).push({ x: Number(x.values[axis]), y: x.value, sd: x.cv != null ? x.cv * x.value : 0 });
    }
    K25Charts.sweep(`chart-sweep-${i}`, axis, Object.entries(groups).map(([label, points]) => ({ label, points })), unit, 1);
  });
  $("sweep").innerHTML = r.rows.map((x) => `<tr class="${x.best ? "best" : ""}"><td>${x.best ? "★ " : ""}${esc(x.profile)}</td>
    ${r.axes.map((a) => `<td>${esc(String(x.values[a] ?? "(base)"))}</td>`).join("")}
    <td>${fmt(x.value, 1)}${x.cv != null ? ` <span class="mute">±${fmt(100 * x.cv, 1)}%</span>` : ""}</td>
    <td>${x.ratio == null ? "–" : fmt(x.ratio, 2) + "x"}</td><td class="verdict v-${esc((x.verdict || "").split(" ")[0])}">${esc(x.verdict_text || x.verdict || "–")}</td>
    <td>${fmt(x.acceptance_length, 2)}</td><td>${fmt(x.predicted_length, 2)}</td></tr>`).join("");
  $("sweep-head").innerHTML = `<th>variant</th>${r.axes.map((a) => `<th>${esc(a)}</th>`).join("")}<th>${esc(r.metric)}</th><th>ratio</th><th>verdict</th><th>acc. length</th><th>predicted</th>`;
}

async function refresh() {
  try {
    const [st, profiles, runs, cmp, exps, host] = await Promise.all([api("/status"), api("/profiles"), api("/runs?limit=15"), api("/compare"), api("/experiments?limit=10"), api("/host")]);
    renderStatus(st); renderGpus(st.gpus || [], st.gpu_health); renderProfiles(profiles); renderHost(host); renderRuns(runs); renderCompare(cmp);
    await refreshSweep(exps);
    await refreshServing();
  } catch (e) { toast(e.message); }
}

let pending = null;
function onHostEvent(st) {
  renderStatus(Object.assign({}, status || {}, st));
  clearTimeout(pending); pending = setTimeout(refresh, 300);  // lists follow state changes, coalesced
}

// Server-sent events over fetch (EventSource cannot send the token that reads may require).
async function connect() {
  try {
    const r = await fetch("/events", {headers: authHeaders()});
    if (r.ok) {
      const reader = r.body.getReader(), dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += dec.decode(value, {stream: true});
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const data = buf.slice(0, cut).split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
          buf = buf.slice(cut + 2);
          if (data) onHostEvent(JSON.parse(data));
        }
      }
    }
  } catch (e) { /* the daemon restarts: connect again */ }
  setTimeout(connect, 2000);
}

$("restore").onclick = () => mutate("/restore");
$("cancel").onclick = () => status && status.run_id && mutate(`/runs/${status.run_id}/cancel`);
refresh().then(connect);
setInterval(async () => {  // the live figures move between state changes
  if (status && status.serving) { try { renderStatus(await api("/status")); await refreshServing(); } catch (e) { /* next time */ } }
}, 3000);
