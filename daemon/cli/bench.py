"""CLI commands that start benchmarks: bench (the active profile), experiment (several profiles, then
restore). Reading them back: results.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from daemon.cli import sweep
from daemon.cli.client import ApiJson, Client
from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.remote import Add, Deciles, bar, client, emit
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
    if args.acceptance_by_category:
        out["acceptance_by_category"] = True
    if args.capacity:
        search = {"start_rate": args.start_rate, "factor": args.factor, "resolution": args.resolution}
        search |= {"extend": args.extend}
        out["capacity"] = search | ({"max_rate": args.max_rate} if args.max_rate else {})
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
    p.add_argument(
        "--acceptance-by-category",
        action="store_true",
        help="a speculative profile: acceptance per prompt category with its interval, after each level",
    )
    p.add_argument(
        "--capacity",
        action="store_true",
        help="in place of the levels: the highest Poisson rate that meets --slo (bracketed, then bisected)",
    )
    p.add_argument("--start-rate", type=float, default=1.0, help="--capacity: the first rate (req/s)")
    p.add_argument("--factor", type=float, default=2.0, help="--capacity: each bracketing step's factor")
    p.add_argument("--resolution", type=float, default=0.1, help="--capacity: the bracket's width (0.1)")
    p.add_argument("--max-rate", type=float, help="--capacity: never step above this rate")
    p.add_argument(
        "--extend",
        type=float,
        default=4.0,
        help="--capacity: an undecided step measures up to this many times --requests (4)",
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
