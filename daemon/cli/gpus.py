"""CLI for the GPUs' health: `k25-ctl gpus` (each GPU's state, why, its readings and latest events),
`gpus reset` (the plan, then the reset, followed to its end), `gpus ack` (clear the marks without a
reset), and `k25-ctl doctor` (is the host ready: exit 0 when no check fails, 3 when one does)."""

from __future__ import annotations

import argparse
import time

from daemon.cli.client import ApiJson
from daemon.cli.exit_codes import EXIT_FAILED, EXIT_OK
from daemon.cli.remote import Add, client, emit, figure, follow

SHOWN = ("ecc_volatile_corrected", "ecc_volatile_uncorrected", "remapped_uncorrectable", "remap_pending")
MARK = {"pass": "ok  ", "warn": "warn", "fail": "FAIL"}


def _gpu_lines(g: ApiJson) -> list[str]:
    r = g["readings"]
    head = f"GPU {g['index']}  {g['bus_id'] or '?':16} {g['state']:12}"
    if g["lost"]:
        head += " LOST"
    else:
        head += (
            f" {figure(r.get('temperature_c'), '.0f')} C  {figure(r.get('power_w'), '.0f')} W  "
            f"PCIe gen {figure(r.get('pcie_gen'), 'd')}/{figure(r.get('pcie_gen_max'), 'd')} "
            f"x{figure(r.get('pcie_width'), 'd')}/{figure(r.get('pcie_width_max'), 'd')}  "
            f"NVLink {figure(r.get('nvlink_up'), 'd')}/{figure(r.get('nvlink_links'), 'd')}  "
            + "  ".join(f"{k} {r[k] if r.get(k) is not None else 'n/s'}" for k in SHOWN)
        )
    lines = [head]
    lines += [f"    why: {why}" for why in g["reasons"]]
    if g["unsupported"]:
        lines.append(f"    not supported here: {', '.join(g['unsupported'])}")
    for e in g["events"][:3]:
        at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["at"]))
        lines.append(f"    {at} {e['source']}: {e['meaning']}" + (f" (pid {e['pid']})" if e["pid"] else ""))
    return lines


def gpus(args: argparse.Namespace) -> int:
    out = client(args).get("/gpus")
    lines = [f"read in {figure(out['read_ms'])} ms; events: {out['events']}"]
    if out["read_error"]:
        lines.append(f"cannot read the GPUs: {out['read_error']}")
    for g in out["gpus"]:
        lines += _gpu_lines(g)
    emit(args, out, "\n".join(lines))
    return EXIT_OK


def _selection(args: argparse.Namespace) -> ApiJson:
    return {
        "gpus": args.gpu or None,
        "force": getattr(args, "force", False),
        "note": getattr(args, "note", ""),
    }


def reset(args: argparse.Namespace) -> int:
    c = client(args)
    _, plan = c.post("/gpus/reset/plan", _selection(args))
    holders = ", ".join(
        f"{h['pid']} ({h['title'][:40]}{', foreign' if h['foreign'] else ''})" for h in plan["holders"]
    )
    text = (
        f"reset GPUs {plan['gpus']}\n  stops    {', '.join(plan['engines']) or 'no engine'}\n"
        f"  kills    {holders or 'nothing holds them'}\n  runs     {' '.join(plan['command'])}"
    )
    if plan["refused"]:
        text += f"\n  refused: {plan['refused']}"
    if args.dry_run or plan["refused"]:
        emit(args, plan, text)
        return EXIT_OK if args.dry_run and not plan["refused"] else EXIT_FAILED
    if not args.json:
        print(text, flush=True)
    _, started = c.post("/gpus/reset", _selection(args))
    return follow(c, started["run_id"], as_json=args.json, success="ok")


def acknowledge(args: argparse.Namespace) -> int:
    c = client(args)
    _, started = c.post("/gpus/ack", _selection(args))
    run = c.get(f"/runs/{started['run_id']}")
    emit(
        args, run, f"run {run['id']}: {run['events'][-1]['detail'] if run.get('events') else run['outcome']}"
    )
    return EXIT_OK


def doctor(args: argparse.Namespace) -> int:
    out = client(args).get("/doctor")
    lines = []
    for ch in out["checks"]:
        lines.append(f"{MARK.get(ch['status'], ch['status'])}  {ch['name']:18} {ch['detail']}")
        if ch["status"] != "pass" and ch["fix"]:
            lines.append(f"{'':24}fix: {ch['fix']}")
    lines.append("ready" if out["ok"] else "not ready: fix what failed")
    emit(args, out, "\n".join(lines))
    return EXIT_OK if out["ok"] else EXIT_FAILED


def gpus_command(args: argparse.Namespace) -> int:
    return {"show": gpus, "reset": reset, "ack": acknowledge}[args.action](args)


def add_gpu_commands(add: Add) -> None:
    p = add("gpus", gpus_command, "the GPUs' health; `gpus reset` resets them, `gpus ack` clears marks")
    p.add_argument(
        "action",
        nargs="?",
        choices=("show", "reset", "ack"),
        default="show",
        help="show (default): state, why, readings, events; reset: stop their engines, tear down, run the "
        "reset command, read again; ack: clear their marks without a reset (recorded as a run)",
    )
    p.add_argument(
        "--gpu", type=int, action="append", help="a GPU (repeat; default: all, or every marked one)"
    )
    p.add_argument("--force", action="store_true", help="reset even while a foreign process holds them")
    p.add_argument("--dry-run", action="store_true", help="reset: print the plan only")
    p.add_argument("--note", default="", help="ack: why (kept with the run)")
    add("doctor", doctor, "is this host ready: driver, GPUs, links, memlock, /dev/shm, RAM, engines, ports")
