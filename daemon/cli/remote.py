"""CLI commands that talk to the daemon: status, profiles, activate, restore, unpark, runs, run, cancel,
teardown."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from daemon.cli.client import ApiError, ApiJson, Client, daemon_url, read_token
from daemon.cli.exit_codes import EXIT_BUSY, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from daemon.cli.plugins import running_demo
from daemon.core.hoststate import age_text
from daemon.core.run_types import UNSUCCESSFUL
from daemon.core.settings import Settings, config_file, installed, load_settings

# A run's outcome as the daemon sent it (an unknown one, from a newer daemon, is not a failure).
FAILED_OUTCOMES = frozenset(o.value for o in UNSUCCESSFUL)


def client(args: argparse.Namespace) -> Client:
    settings = load_settings() if installed() else _demo_settings()
    return Client(getattr(args, "url", None) or daemon_url(settings), read_token(settings))


def _demo_settings() -> Settings:
    """No install on this host (no settings file, no K25_CONFIG): the CLI talks to the running demo
    sandbox, with its settings and token; on an installed host the sandbox is never consulted."""
    demo = running_demo()
    if demo is None:
        return load_settings()
    where = f"sandbox {demo.name} at {demo.url} (K25_CONFIG={demo.config})"
    print(f"k25-ctl: no install here ({config_file()}): talking to {where}", file=sys.stderr)
    os.environ["K25_CONFIG"] = demo.config  # this process's settings from here on are the sandbox's
    return load_settings()


# How a command module registers a command: its name, its function and its help; returns its parser.
Add = Callable[[str, Callable[[argparse.Namespace], int], str], argparse.ArgumentParser]


def figure(value: Any, fmt: str = ".1f") -> str:
    """A number for a table, or '-' for none."""
    return "-" if value is None else format(value, fmt)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def status(args: argparse.Namespace) -> int:
    st = client(args).get("/status")
    lines = [f"state    {st['state']}" + (f"  ({st['reason']})" if st.get("reason") else "")]
    lines.append(f"active   {st['active_profile'] or '-'}")
    if st.get("run_id"):
        pct = st.get("progress_percent")
        prog = f" {pct}% ({st['progress_done']}/{st['progress_total']})" if pct is not None else ""
        lines.append(f"run      {st['run_id']} -> {st['target_profile']}: {st['phase']}{prog}")
    lines += [describe_parked(pk) for pk in st.get("parked") or []]
    if held := st.get("ram_held"):  # the RAM ledger
        each = (
            f"{h['profile']}{' (parked)' if h['parked'] else ''} {h['bytes'] / 2**30:.2f} GiB" for h in held
        )
        lines.append("host RAM " + ", ".join(each))
    age = _age(st.get("gpus_sampled_at"))
    for g in st["gpus"]:
        lines.append(
            f"gpu {g['index']}    {g['memory_used_mib']}/{g['memory_total_mib']} MiB, "
            f"{len(g['processes'])} processes" + (f" (read {age} ago)" if age else "")
        )
    emit(args, st, "\n".join(lines))
    return EXIT_OK


def profiles(args: argparse.Namespace) -> int:
    items = client(args).get("/profiles")
    lines = []
    for p in items:
        if p["valid"]:
            state = (p.get("unit_state") or {}).get("active_state", "?")
            res = p.get("residency")
            cached = f"{res['percent']:5.1f}% of {res['bytes'] / 2**30:.1f} GiB cached" if res else "cache ?"
            engine = f"{p['engine']} {p.get('engine_version') or '?'}"
            lines.append(
                f"{p['name']:20} {engine:14} {p['unit']:40} {state:10} {cached}"
                + (f" (warm {p['warm']})" if p.get("warm") not in (None, "off") else "")
                + ("  (default)" if p["default"] else "")
                + ("  (parked)" if p.get("parked") else "")
            )
            if known := p.get("known_answer"):
                lines.append("    " + describe_known_answer(known))
            lines += [f"    note: {note}" for note in p.get("engine_notes") or []]
        else:
            lines.append(f"{p['name']:20} INVALID {p['error']}")
    emit(args, items, "\n".join(lines))
    return EXIT_OK


def bar(percent: int, width: int = 30) -> str:
    filled = width * percent // 100
    return "[" + "#" * filled + "." * (width - filled) + f"] {percent:3d}%"


class Deciles:
    """Progress on a pipe or in the journal: a bar's first line, one per 10% and its end, not one per step
    (a terminal redraws one line instead)."""

    def __init__(self) -> None:
        self._shown: dict[str, int] = {}

    def wants(self, bar_name: str, percent: int) -> bool:
        step = min(percent, 100) // 10
        if self._shown.get(bar_name) == step:
            return False
        self._shown[bar_name] = step
        return True


def follow(c: Client, run_id: int, *, as_json: bool, success: str = "active") -> int:
    """Print the run's phases and progress (loading, warming) as they happen; the exit code from its
    outcome."""
    shown = None if sys.stdout.isatty() else Deciles()
    for e in c.events(f"/runs/{run_id}/events"):
        if as_json:
            print(json.dumps(e, default=str), flush=True)
        elif (pct := e.get("progress_percent")) is not None:
            if shown is not None and not shown.wants(e["phase"], pct):
                continue
            print(
                f"  {e['phase']} {bar(e['progress_percent'])} ({e['progress_done']}/{e['progress_total']})",
                flush=True,
            )
        else:
            print(f"  {e['phase']:9} {e['detail'][:160]}", flush=True)
    run = c.get(f"/runs/{run_id}")
    final = run["outcome"]
    if not as_json:
        print(f"run {run_id}: {final}" + (f"\n{run['error']}" if run.get("error") else ""))
    return EXIT_OK if final == success else EXIT_FAILED


def _started(c: Client, args: argparse.Namespace, body: ApiJson, success: str) -> int:
    run_id = body["run_id"]
    if not args.wait:
        emit(args, body, f"run {run_id} started (k25-ctl run {run_id}; k25-ctl cancel {run_id})")
        return EXIT_OK
    if not args.json:
        print(f"run {run_id}:")
    return follow(c, run_id, as_json=args.json, success=success)


def activate(args: argparse.Namespace) -> int:
    c = client(args)
    if getattr(args, "dry_run", False):
        return _plan_switch(c, args)
    path = "/restore" if args.command == "restore" else f"/profiles/{args.profile}/activate"
    params = {"drain": str(not args.no_drain).lower()}
    if args.command != "restore":
        params["force"] = str(args.force).lower()
    _, body = c.post(path, **params)
    if body.get("run_id") is None:
        emit(args, body, "already active: nothing to do")
        return EXIT_OK
    return _started(c, args, body, "active")


def _plan_switch(c: Client, args: argparse.Namespace) -> int:
    """`activate --dry-run`: what the switch would do now (POST /plans), nothing started."""
    body = {"activate": args.profile, "drain": not args.no_drain, "force": args.force}
    _, plan = c.post("/plans", body)
    if not plan["switch"]:
        emit(args, plan, f"would not switch: {plan['reason']}")
        return EXIT_OK if plan["refused"] is None else EXIT_BUSY
    took = f"; the last one took {plan['estimate_s']:.0f} s" if plan["estimate_s"] is not None else ""
    away = f"{plan['from_profile']} would {plan['away']}, " if plan["away"] else ""
    emit(args, plan, f"would switch: {away}{plan['profile']} would {plan['start']}{took}")
    return EXIT_OK


def warm(args: argparse.Namespace) -> int:
    c = client(args)
    _, body = c.post(f"/profiles/{args.profile}/warm")
    return _started(c, args, body, "ok")


def unpark(args: argparse.Namespace) -> int:
    _, r = client(args).post(f"/profiles/{args.profile}/unpark")
    detail = r["events"][-1]["detail"] if r.get("events") else r["outcome"]
    emit(args, r, f"run {r['id']} unpark {args.profile}: {r['outcome']}: {detail}")
    return EXIT_OK if r["outcome"] not in FAILED_OUTCOMES else EXIT_FAILED


def runs(args: argparse.Namespace) -> int:
    items = client(args).get("/runs", profile=args.profile, limit=args.limit)
    lines = [
        f"{r['id']:>5} {r['kind']:9} {r['profile'] or '-':18} {r['outcome']:12} {r['started_at'][:19]}"
        + (f"  load {r['load_seconds']:.1f}s" if r["load_seconds"] else "")
        for r in items
    ]
    emit(args, items, "\n".join(lines) or "no runs yet")
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    r = client(args).get(f"/runs/{args.run_id}")
    lines = [f"run {r['id']} {r['kind']} {r['profile']} (from {r['from_profile'] or '-'}): {r['outcome']}"]
    if r.get("load_breakdown"):
        parts = ", ".join(f"{b['stage']} {b['seconds']:.1f}s" for b in r["load_breakdown"])
        lines.append(f"  load: {parts} (start -> HTTP up {r['load_seconds'] or 0:.1f}s)")
    if cost := r.get("switch_cost"):
        lines.append(f"  clients: {describe_cost(cost)}")
    lines += [f"  {e['at'][11:23]} {e['phase']:9} {e['detail'][:160]}" for e in r["events"]]
    if r.get("error"):
        lines.append(f"error:\n{r['error']}")
    emit(args, r, "\n".join(lines))
    return EXIT_OK if r["outcome"] not in FAILED_OUTCOMES else EXIT_FAILED


def _age(at: str | None) -> str | None:
    return age_text(max(0.0, time.time() - datetime.fromisoformat(at).timestamp())) if at else None


def describe_known_answer(known: ApiJson) -> str:
    """A profile's known answer in one line: what it said, when, and how it agrees with the default's."""
    first = known["answers"][0]["text"].strip() if known["answers"] else ""
    said = first if len(first) <= 40 else first[:39] + "…"
    line = f"known answer {said!r} (run {known['run_id']}, {age_text(known['age_s'])} ago)"
    if agreed := known.get("agreement"):
        line += f"; {agreed['text']}"
    return line


def describe_parked(pk: ApiJson) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(pk["since"]))
    held = f"{sum(pk['gpu_mib'].values())} MiB on {len(pk['gpu_mib'])} GPU(s)"
    return (
        f"parked   {pk['profile']} since {since} (level {pk['level']}, main PID {pk['main_pid']}): "
        f"{held}, {pk['host_ram_bytes'] / 2**30:.1f} GiB host RAM"
    )


def describe_cost(cost: ApiJson) -> str:
    """What a switch cost the clients, one line."""
    parts = []
    if cost.get("downtime_s") is not None:
        parts.append(f"out of rotation {cost['downtime_s']:.1f}s")
    if cost.get("drain_s") is not None:
        late = " (timed out)" if cost.get("drain_timed_out") else ""
        parts.append(f"drained {cost['drain_s']:.1f}s{late}, {cost.get('drain_finished') or 0} finished")
    elif cost.get("drain_cut") is not None:
        parts.append("not drained")
    if cost.get("drain_cut") is not None:
        parts.append(f"{cost['drain_cut']} cut")
    return ", ".join(parts) or "-"


def cancel(args: argparse.Namespace) -> int:
    _, body = client(args).post(f"/runs/{args.run_id}/cancel")
    emit(args, body, f"cancelling run {args.run_id}")
    return EXIT_OK


def remote_plan(args: argparse.Namespace) -> ApiJson:
    plan: ApiJson = client(args).get("/teardown/plan")
    return plan


def exit_code(e: ApiError) -> int:
    print(f"k25-ctl: {e.detail} (HTTP {e.status})", file=sys.stderr)
    if e.status == 409:
        return EXIT_BUSY
    if e.status in (400, 401, 403, 404, 413, 422):
        return EXIT_USAGE
    return EXIT_FAILED
