"""CLI for sweeps: an experiment's plan (--dry-run), its variants ranked (compare --experiment), and
promote (a variant written as a new profile file)."""

from __future__ import annotations

import argparse

from daemon.cli.client import ApiJson, Client
from daemon.cli.exit_codes import EXIT_OK
from daemon.cli.remote import Add, client, emit, figure


def plan(c: Client, args: argparse.Namespace, body: ApiJson) -> int:
    _, p = c.post("/plans", body)
    about = f"{p['estimate_s'] / 60:.1f} min" if p["estimate_s"] is not None else "? (see the notes)"
    lines = [f"plan: {len(p['steps'])} steps over {p['base']}, {p['switches']} switches, about {about}"]
    for i, s in enumerate(p["steps"], 1):
        values = ", ".join(f"{k}={v}" for k, v in s["values"].items()) or "as it is"
        lines.append(
            f"  {i:2}. {s['profile']}  ({values}); switch ~{figure(s['switch_s'], '.0f')} s, "
            f"benchmarks ~{figure(s['benchmark_s'], '.0f')} s"
        )
    lines += [f"note: {n}" for n in p["notes"]]
    emit(args, p, "\n".join(lines))
    return EXIT_OK


def sweep_table(args: argparse.Namespace) -> int:
    r = client(args).get(f"/experiments/{args.experiment}/sweep", metric=args.metric)
    axes = r["axes"]
    head = f"{'':2}{'profile':44} " + "".join(f"{a[:14]:>15}" for a in axes)
    head += f" {'value':>9} {'±%':>5} {'ratio':>7} {'verdict':13} {'acc len':>8} {'predicted':>9}  runs"
    lines = [
        f"experiment {r['experiment_run_id']}: {r['metric']} (ratio: better than {r['base']} above 1)",
        head,
    ]
    for row in r["rows"]:
        cv = None if row["cv"] is None else 100 * row["cv"]
        cells = "".join(f"{str(row['values'].get(a, '(base)'))[:14]:>15}" for a in axes)
        ratio = figure(row["ratio"], ".2f") + "x" if row["ratio"] else "-"
        lines.append(
            f"{'*' if row['best'] else ' ':2}{row['profile'][:44]:44} {cells} {figure(row['value']):>9} "
            f"{figure(cv):>5} {ratio:>7} {row['verdict'] or '-':13} "
            f"{figure(row['acceptance_length'], '.2f'):>8} "
            f"{figure(row['predicted_length'], '.2f'):>9}  " + ",".join(str(i) for i in row["run_ids"])
        )
    if r["recommendation"]:
        lines.append(f"best: {r['recommendation']}")
    if r["promote"]:
        lines.append(f"to keep it: {r['promote']}")
    lines += [f"note: {n}" for n in r["notes"]]
    emit(args, r, "\n".join(lines))
    return EXIT_OK


def promote(args: argparse.Namespace) -> int:
    body: ApiJson = {"variant": args.variant} | ({"name": args.name} if args.name else {})
    _, out = client(args).post(f"/experiments/{args.experiment}/promote", body)
    emit(
        args,
        out,
        f"wrote {out['file']} (profile {out['name']}): review it, then k25-ctl activate {out['name']}",
    )
    return EXIT_OK


def add_commands(add: Add) -> None:
    p = add("promote", promote, "write a sweep's variant as a new profile file (never over one)")
    p.add_argument("experiment", type=int)
    p.add_argument("variant", help="its name, as compare --experiment lists it")
    p.add_argument("--name", help="the new profile's name (default: the base's name and the values)")
