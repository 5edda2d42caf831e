"""`k25-ctl schedule`: the experiments waiting for their systemd timers; `cancel ID`; `fire ID` (what a
schedule's timer runs: the daemon starts the experiment, or records why it skipped it)."""

from __future__ import annotations

import argparse

from daemon.cli.exit_codes import EXIT_OK
from daemon.cli.remote import Add, client, emit


def schedules(args: argparse.Namespace) -> int:
    c = client(args)
    if args.action == "cancel":
        c.delete(f"/schedules/{args.id}")
        emit(args, {"id": args.id, "cancelled": True}, f"schedule {args.id} cancelled")
    elif args.action == "fire":
        _, out = c.post(f"/schedules/{args.id}/fire")
        emit(args, out, f"schedule {args.id}: run {out['run_id']}")
    else:
        items = c.get("/schedules")
        lines = [
            f"{s['id']:>4} {s['unit']:28} next {s['next_run'] or '-':32} at {s['at']!r} "
            f"{', '.join(s['request']['profiles'])}"
            + (f" (max_running {s['max_running']})" if s["max_running"] is not None else "")
            for s in items
        ]
        emit(args, items, "\n".join(lines) or "no schedules")
    return EXIT_OK


def add_schedule_commands(add: Add) -> None:
    p = add("schedule", schedules, "scheduled experiments: list, cancel ID, fire ID (the timer's own call)")
    p.add_argument("action", nargs="?", choices=("list", "cancel", "fire"), default="list")
    p.add_argument("id", nargs="?", type=int)
