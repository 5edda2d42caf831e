"""CLI commands for benchmarks: bench (the active profile), experiment (several profiles, then restore),
compare (a table with verdicts), benchmarks (recent), benchmark (one, or its vLLM-style JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from daemon.cli import sweep
from daemon.cli.client import ApiJson, Client
from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.remote import Add, Deciles, bar, client, emit, figure
from daemon.core.errors import InvalidInput
from daemon.experiments.sweep.variants import parse_vary


def _numbers(text: str, kind: type[int] | type[float]) -> list[Any]:
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise InvalidInput(f"expected comma-separated numbers, got {text!r}") from e


def read_prompts(path: Path) -> list[str]:
    """The operator's JSONL: one object per line with `prompt` (or `text`), or a JSON string per line."""
    prompts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise InvalidInput(f"cannot read {path}: {e.strerror}") from e
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise InvalidInput(f"{path}:{n}: not JSON ({e})") from e
        text = (
            item
            if isinstance(item, str)
            else (item.get("prompt") or item.get("text"))
            if isinstance(item, dict)
            else None
        )
        if not isinstance(text, str) or not text:
            raise InvalidInput(f"{path}:{n}: expected a string or an object with a 'prompt' string")
        prompts.append(text)
    if not prompts:
        raise InvalidInput(f"{path}: no prompts")
    return prompts


def spec(args: argparse.Namespace) -> ApiJson:
    out: ApiJson = {
        "concurrency": _numbers(args.concurrency, int),
        "num_prompts": args.requests,
        "max_tokens": args.max_tokens,
        "warmups": args.warmups,
        "endpoint": args.endpoint,
    }
    if args.rate:
        out["request_rate"] = _numbers(args.rate, float)
        if args.max_concurrency:
            out["max_concurrency"] = args.max_concurrency
    if args.prompts:
        out |= {"dataset": "custom", "prompts": read_prompts(args.prompts)}
    elif args.dataset:
        out["dataset"] = args.dataset
    if args.input_len:
        out["input_len"] = args.input_len
    if args.pace is not None:
        out["pace"] = args.pace
    if args.slo:
        out["slo"] = args.slo
    return out


def _pace(text: str) -> float:
    """`captured` -> 1, `capturedx4` -> 4: the replay's speed-up over the captured arrivals."""
    if text == "captured":
        return 1.0
    if text.startswith("capturedx"):
        try:
            return float(text.removeprefix("capturedx"))
        except ValueError:
            pass
    raise argparse.ArgumentTypeError(f"expected captured or capturedxN (e.g. capturedx4), not {text!r}")


def follow(c: Client, run_id: int, *, as_json: bool, indent: str = "  ") -> str:
    """Print a benchmark's or experiment's events (progress bars for the measured requests) to its end;
    an experiment's benchmarks (its linked runs of kind benchmark) are followed as they start. Returns the
    run's outcome."""
    tty = sys.stdout.isatty()
    shown = None if tty else Deciles()
    experiment = c.get(f"/runs/{run_id}")["kind"] == "experiment"
    followed: set[int] = set()
    for e in c.events(f"/runs/{run_id}/events"):
        if as_json:
            print(json.dumps(e, default=str), flush=True)
        elif e["phase"] == "measuring" and e.get("progress_percent") is not None:
            what = e["detail"].split(":")[0]
            if shown is None or shown.wants(what, e["progress_percent"]):
                counted = f"({e['progress_done']}/{e['progress_total']})"
                line = f"{indent}{what:28} {bar(e['progress_percent'])} {counted}"
                end = "" if tty and e["progress_percent"] < 100 else "\n"
                print(("\r" + line) if tty else line, end=end, flush=True)
        else:
            print(f"{indent}{e['phase']:10} {e['detail'][:160]}", flush=True)
        if experiment and e["phase"] == "measuring" and not e.get("final"):
            for child in _new_benchmarks(c, run_id, followed):
                follow(c, child, as_json=as_json, indent=indent + "  ")
    run: ApiJson = c.get(f"/runs/{run_id}")
    if not as_json:
        print(
            f"{indent[:-2]}run {run_id}: {run['outcome']}" + (f"\n{run['error']}" if run.get("error") else "")
        )
    return str(run["outcome"])


def _new_benchmarks(c: Client, run_id: int, followed: set[int]) -> list[int]:
    """The experiment's benchmark runs not followed yet, oldest first."""
    runs: list[ApiJson] = c.get("/runs", parent=run_id, limit=1000)
    new = sorted(r["id"] for r in runs if r["kind"] == "benchmark" and r["id"] not in followed)
    followed.update(new)
    return new


def bench(args: argparse.Namespace) -> int:
    c = client(args)
    body = spec(args) | ({"profile": args.profile} if args.profile else {})
    _, out = c.post("/benchmarks", body, isolate=str(args.isolate).lower())
    return _started(c, args, out["run_id"], "benchmark")


def experiment(args: argparse.Namespace) -> int:
    c = client(args)
    body = {
        "profiles": args.profiles,
        "benchmark": spec(args),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "until_decided": args.until_decided,
        "restore": not args.no_restore,
    }
    if args.vary:
        body["vary"] = parse_vary(args.vary)
    if args.metric:
        body["metric"] = args.metric
    if args.dry_run:
        return sweep.plan(c, args, body)
    if args.at is not None:
        _, out = c.post("/experiments", body, at=args.at, max_running=args.max_running)
        emit(args, out, f"schedule {out['id']}: {out['unit']}, next run {out['next_run'] or '-'}")
        return EXIT_OK
    _, out = c.post("/experiments", body)
    return _started(c, args, out["run_id"], "experiment")


def _started(c: Client, args: argparse.Namespace, run_id: int, what: str) -> int:
    if not args.wait:
        emit(
            args,
            {"run_id": run_id},
            f"{what} run {run_id} started (k25-ctl run {run_id}; k25-ctl cancel {run_id})",
        )
        return EXIT_OK
    if not args.json:
        print(f"{what} run {run_id}:")
    return EXIT_OK if follow(c, run_id, as_json=args.json) == "ok" else EXIT_FAILED


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
        if predicted := lv.get("predicted_acceptance_length"):
            drafted = len(s.get("spec_decode_per_position_acceptance_rates") or [])
            guesses = ", ".join(f"at k={k} ~{v:.2f}" for k, v in predicted.items())
            measured = figure(s.get("acceptance_length"), ".2f")
            lines.append(
                f"    predicted acceptance length: {guesses} (measured at k={drafted}: {measured}; "
                "from the per-position rates)"
            )
    emit(args, b, "\n".join(lines))
    return EXIT_OK if b["outcome"] in ("ok", "running") else EXIT_FAILED


def _load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--concurrency", default="1", help="fixed concurrency levels, e.g. 1,8,32 (default 1)")
    p.add_argument("--rate", help="Poisson request rates instead, e.g. 0.5,2 (req/s)")
    p.add_argument("--max-concurrency", type=int, help="with --rate: cap on requests in flight")
    p.add_argument("--requests", type=int, default=16, help="measured requests per level (default 16)")
    p.add_argument("--max-tokens", type=int, default=128, help="output tokens per request (default 128)")
    p.add_argument("--warmups", type=int, default=1, help="warm-up requests per level, not counted")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument(
        "--dataset",
        help="prompts: builtin (default), random, or a stored dataset (k25-ctl datasets): its own prompts, "
        "parameters, categories and lengths",
    )
    p.add_argument(
        "--pace",
        type=_pace,
        help="a captured dataset at its own arrival times: captured, or capturedxN (N times faster)",
    )
    p.add_argument("--input-len", type=int, help="random dataset: prompt length")
    p.add_argument(
        "--slo", help="a latency SLO: ttft_p95_ms=800,tpot_p95_ms=60,errors=0.5%% or a name from [slos]"
    )
    p.add_argument("--prompts", type=Path, help='your JSONL: one {"prompt": ...} per line')
    p.add_argument("--wait", action="store_true", help="follow it with progress bars (exit 0 ok, 3 not)")


def add_commands(add: Add) -> None:
    p = add("bench", bench, "benchmark the active profile")
    p.add_argument("profile", nargs="?", help="must be the active one (default: whatever is active)")
    p.add_argument("--isolate", action="store_true", help="out of the balancer's rotation while it runs")
    _load_options(p)
    p = add("experiment", experiment, "switch to each PROFILE, benchmark it, then restore")
    p.add_argument("profiles", nargs="+")
    p.add_argument(
        "--repeats", type=int, default=1, help="benchmarks per profile (their spread is the noise)"
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="interleaved rounds (ABBA for two profiles): a drift of the host falls on each alike",
    )
    p.add_argument(
        "--until-decided", action="store_true", help="two profiles: stop at the round that decides"
    )
    p.add_argument("--no-restore", action="store_true", help="stay on the last profile")
    p.add_argument("--at", help='later, by a systemd timer: "Sat 03:00" (OnCalendar=) or "+10min"')
    p.add_argument("--max-running", type=int, help="with --at: skip it if the engine serves more requests")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a sweep of the one PROFILE: a profile key (speculative.num_speculative_tokens) or "
        "an engine flag (max_num_seqs); repeat it for more axes (every combination)",
    )
    p.add_argument("--metric", help="what ranks a sweep: throughput (default), tpot_p50, ttft_p99, NAME@C")
    p.add_argument("--dry-run", action="store_true", help="print the sweep's plan and time; start nothing")
    _load_options(p)
    p = add("compare", compare, "the latest benchmark of each profile against the baseline")
    p.add_argument("--baseline", default="baseline")
    p.add_argument("--spec", help="a benchmark spec hash (default: the baseline's latest)")
    p.add_argument("--experiment", type=int, help="an experiment's profiles (a sweep's variants) as rows")
    p.add_argument("--metric", help="with --experiment: throughput (default), tpot_p50, ttft_p99, NAME@C")
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
