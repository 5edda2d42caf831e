"""CLI commands that read benchmarks back: compare (a table with verdicts), benchmarks (recent), benchmark
(one, or its vLLM-style JSON), import-benchmark (another tool's figures)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from daemon.cli import pareto, sweep
from daemon.cli.client import ApiJson
from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.remote import Add, client, emit, figure
from daemon.core.errors import InvalidInput


def compare(args: argparse.Namespace) -> int:
    if args.experiment is not None:
        return sweep.sweep_table(args)
    cmp = client(args).get("/compare", baseline=args.baseline, benchmark_spec=args.spec)
    head = (
        f"{'profile':18} {'tok/s':>8} {'±%':>5} {'speedup':>8} {'verdict':22} {'TTFT p50':>9} "
        f"{'TPOT p50':>9} {'ITL p99':>8} {'acc len':>8} {'acc rate':>8}  runs"
    )
    lines = [
        f"{cmp['metric']}; spec {cmp['spec_hash']}, prompts {cmp['prompt_hash']}, "
        f"GPUs {cmp['gpu_key'] or '-'}",
        head,
    ]
    for r in cmp["rows"]:
        lat = r["latency_ms"]
        cv = None if r["throughput_cv"] is None else 100 * r["throughput_cv"]
        speedup = figure(r["speedup"], ".2f") + "x" if r["speedup"] else "-"
        lines.append(
            f"{r['profile']:18} {figure(r['output_throughput']):>8} {figure(cv):>5} {speedup:>8} "
            f"{r['verdict'] or '-':22} {figure(lat['ttft']['median']):>9} "
            f"{figure(lat['tpot']['median'], '.2f'):>9} "
            f"{figure(lat['itl']['p99'], '.2f'):>8} {figure(r['acceptance_length'], '.2f'):>8} "
            f"{figure(r['acceptance_rate'], '.3f'):>8}  " + ",".join(str(i) for i in r["run_ids"])
        )
    lines += _judged(cmp["rows"])
    lines += [f"{r['profile']}: {r['per_category']}" for r in cmp["rows"] if r.get("per_category")]
    lines += _category_table(cmp["rows"])
    lines += [f"note: {n}" for n in cmp["notes"]]
    lines += [f"known answer of {a['profile']} {a['text']}" for a in cmp.get("answers") or []]
    if args.pareto or args.plot:
        lines += pareto.table(cmp["rows"], args.x, args.y)
    if args.plot:
        pareto.plot(
            cmp["rows"], args.x, args.y, args.plot, f"spec {cmp['spec_hash']}; {cmp['gpu_key'] or ''}"
        )
        lines.append(f"wrote {args.plot}")
    emit(args, cmp, "\n".join(lines))
    return EXIT_OK


JUDGED = {"throughput": "tok/s", "ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E"}


def _judged(rows: list[ApiJson]) -> list[str]:
    """Each profile's verdicts from its requests: the ratio's 95% interval (above 1: better)."""
    out = []
    for r in rows:
        judged, texts = r.get("judged") or {}, r.get("judged_text") or {}
        for key, label in JUDGED.items():
            if (j := judged.get(key)) is not None:
                n, k = j["samples"], j.get("rounds") or [1, 1]
                over = f" in {k[0]} and {k[1]} rounds" if j.get("scope") == "rounds" else ""
                out.append(f"{r['profile']}: {label}: {texts[key]} ({n[0]} and {n[1]} requests{over})")
    return out


def _category_table(rows: list[ApiJson]) -> list[str]:
    """Per prompt category of each profile: requests, per-stream tok/s, TPOT, acceptance, verdict."""
    if not any(r.get("categories") for r in rows):
        return []
    head = f"{'profile':18} {'category':10} {'reqs':>5} {'tok/s':>8} {'TPOT p50':>9} {'acc len':>8}"
    out = [f"{head} {'speedup':>8}"]
    for r in rows:
        for name, cat in (r.get("categories") or {}).items():
            speedup = figure(cat["speedup"], ".2f") + "x" if cat.get("speedup") else "-"
            out.append(
                f"{r['profile']:18} {name:10} {cat['requests']:>5} {figure(cat['stream_tok_s']):>8} "
                f"{figure(cat['median_tpot_ms'], '.2f'):>9} {figure(cat['acceptance_length'], '.2f'):>8} "
                f"{speedup:>8} {cat.get('verdict') or ''}"
            )
    return out


def benchmarks(args: argparse.Namespace) -> int:
    items = client(args).get("/benchmarks", profile=args.profile, limit=args.limit)
    lines = [
        f"{b['run_id']:>5} {b['profile'] or '-':18} {b['outcome']:10} {b['started_at'][:19]}  "
        f"{figure(b['output_throughput'])} tok/s  acc len {figure(b['acceptance_length'], '.2f')}  "
        f"spec {b['spec_hash'] or '-'}"
        for b in items
    ]
    emit(args, items, "\n".join(lines) or "no benchmarks yet")
    return EXIT_OK


def import_benchmark(args: argparse.Namespace) -> int:
    """A `vllm bench serve --save-result` file (or k25-ctl's export) stored as an imported benchmark."""
    try:
        results = json.loads(args.file.read_text())
    except (OSError, ValueError) as e:
        raise InvalidInput(f"{args.file}: {e}") from None
    _, out = client(args).post(
        "/benchmark-imports", {"profile": args.as_, "label": args.label, "results": results}
    )
    emit(args, out, f"imported as benchmark run {out['run_id']} of {args.as_}")
    return EXIT_OK


def benchmark(args: argparse.Namespace) -> int:
    c = client(args)
    if args.export:
        print(json.dumps(c.get(f"/benchmarks/{args.run_id}/export"), indent=2))
        return EXIT_OK
    b = c.get(f"/benchmarks/{args.run_id}")
    lines = [
        f"benchmark run {b['run_id']} of {b['profile']}: {b['outcome']}"
        + (f" ({b['error']})" if b["error"] else "")
    ]
    for lv in b["levels"]:
        s = lv["summary"]
        lines.append(
            f"  c={lv['concurrency'] or '-'} rate={lv['request_rate'] or 'inf'}: "
            f"{s['completed']} ok, {s['failed']} failed, "
            f"{figure(s['output_throughput'])} tok/s, TTFT p50 {figure(s['median_ttft_ms'])} ms, TPOT p50 "
            f"{figure(s['median_tpot_ms'], '.2f')} ms, ITL p99 {figure(s['p99_itl_ms'], '.2f')} ms"
            + (
                f", acceptance {figure(s.get('acceptance_rate'), '.3f')} "
                f"(length {figure(s.get('acceptance_length'), '.2f')})"
                if s.get("acceptance_length")
                else ""
            )
        )
        if "slo" in s:
            verdict = "met" if s["slo_met"] else "missed: " + "; ".join(s["slo_missed"])
            lines.append(
                f"    SLO {s['slo']}: {verdict}; goodput {figure(s['request_goodput'], '.2f')} req/s"
            )
        for name, cat in (s.get("categories") or {}).items():
            tpot, length = figure(cat["median_tpot_ms"], ".2f"), figure(cat["acceptance_length"], ".2f")
            lines.append(
                f"    {name}: {cat['completed']}/{cat['requests']} ok, {figure(cat['stream_tok_s'])} tok/s a "
                f"stream, TPOT p50 {tpot} ms, acc len {length}"
            )
        for name, acc in (s.get("category_acceptance") or {}).items():
            band = f" [{figure(acc['low'], '.2f')}, {figure(acc['high'], '.2f')}]" if acc.get("low") else ""
            lines.append(
                f"    {name}: acceptance length {figure(acc['acceptance_length'], '.2f')}{band} "
                f"({acc['units']} units; {acc['method']})"
            )
        if predicted := lv.get("predicted_acceptance_length"):
            drafted = len(s.get("spec_decode_per_position_acceptance_rates") or [])
            guesses = ", ".join(f"at k={k} ~{v:.2f}" for k, v in predicted.items())
            measured = figure(s.get("acceptance_length"), ".2f")
            lines.append(
                f"    predicted acceptance length: {guesses} (measured at k={drafted}: {measured}; "
                "from the per-position rates)"
            )
    if found := b.get("capacity"):
        lines.append(found["text"])
    emit(args, b, "\n".join(lines))
    return EXIT_OK if b["outcome"] in ("ok", "running") else EXIT_FAILED


def add_commands(add: Add) -> None:
    p = add("compare", compare, "the latest benchmark of each profile against the baseline")
    p.add_argument("--baseline", default="baseline")
    p.add_argument("--spec", help="a benchmark spec hash (default: the baseline's latest)")
    p.add_argument("--experiment", type=int, help="an experiment's profiles (a sweep's variants) as rows")
    p.add_argument("--metric", help="with --experiment: throughput (default), tpot_p50, ttft_p99, NAME@C")
    p.add_argument("--pareto", action="store_true", help="per profile: latency against throughput per level")
    p.add_argument("--plot", type=Path, help="that chart as an SVG or PNG file (needs k25-ctl[plot])")
    p.add_argument("--x", choices=sorted(pareto.X_KEYS), default="throughput", help="--pareto's x axis")
    p.add_argument("--y", choices=sorted(pareto.Y_KEYS), default="tpot_p95", help="--pareto's y axis")
    p = add("benchmarks", benchmarks, "recent benchmarks")
    p.add_argument("--profile")
    p.add_argument("--limit", type=int, default=20)
    p = add("benchmark", benchmark, "one benchmark: levels, or --export as vllm bench serve JSON")
    p.add_argument("run_id", type=int)
    p.add_argument("--export", action="store_true")
    p = add("import-benchmark", import_benchmark, "a vllm bench serve result file, stored as an imported run")
    p.add_argument("file", type=Path)
    p.add_argument("--as", dest="as_", required=True, help="the profile name it is listed under")
    p.add_argument("--label", default="", help="where the figures came from")
