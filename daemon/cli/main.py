"""The `k25-ctl` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from daemon.cli.check_profiles import check_profiles
from daemon.cli.client import ApiError, ApiJson
from daemon.cli.exit_codes import EXIT_BUSY, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from daemon.cli.host import add_host_commands
from daemon.cli.plugins import sandbox_commands
from daemon.core.errors import K25Error
from daemon.core.settings import load_settings


def _cmd_launch(args: argparse.Namespace) -> int:
    from daemon.switching.launch import exec_profile

    exec_profile(load_settings(), args.profile)
    return EXIT_FAILED  # exec_profile only returns by raising


def _cmd_serve(args: argparse.Namespace) -> int:
    from daemon.startup.serve import serve

    return serve()


def _cmd_teardown(args: argparse.Namespace) -> int:
    import asyncio
    from dataclasses import asdict

    from daemon.teardown.build import build_teardown

    if not args.local:
        from daemon.cli import remote as cli_remote

        if args.dry_run:
            data = cli_remote.remote_plan(args)
        else:
            data = cli_remote.client(args).post("/teardown")[1]
            print(json.dumps(data, indent=2, default=str))
            return EXIT_OK if data["report"]["ok"] else EXIT_FAILED
    else:
        settings = load_settings()
        teardown = build_teardown(settings)
        gpus = tuple(args.gpus) if args.gpus else None
        if not args.dry_run:
            report = asyncio.run(teardown.run(gpus))
            print(json.dumps(report.to_dict(), indent=2, default=str))
            return EXIT_OK if report.ok else EXIT_FAILED
        data = asdict(asyncio.run(teardown.plan(gpus)))
    print(json.dumps(data, indent=2, default=str) if args.json else format_plan(data))
    return EXIT_OK if not data["refused"] else EXIT_BUSY


def format_plan(plan: ApiJson) -> str:
    """A teardown plan (as JSON) for people: who gets which signal and why, who is spared, which files go."""
    lines = [f"victims ({len(plan['victims'])}): SIGTERM, then SIGKILL after the grace period"]
    for v in plan["victims"]:
        mem = f", {v['gpu_mib']} MiB GPU" if v["gpu_mib"] else ""
        foreign = "FOREIGN " if v["foreign"] else ""
        lines.append(f"  {v['pid']:>7} {v['title'][:60]:60} {foreign}{'; '.join(v['reasons'])}{mem}")
    lines.append(f"spared ({len(plan['spared'])}):")
    lines += [f"  {s['pid']:>7} {s['title'][:60]:60} {s['reason']}" for s in plan["spared"]]
    lines.append(f"shm files to remove ({len(plan['shm_remove'])}):")
    lines += [f"  {d['entry']['name']} ({d['entry']['size']} B): {d['reason']}" for d in plan["shm_remove"]]
    lines.append(f"shm files kept ({len(plan['shm_keep'])}):")
    lines += [f"  {d['entry']['name']}: {d['reason']}" for d in plan["shm_keep"]]
    if plan["refused"]:
        pids = ", ".join(str(v["pid"]) for v in plan["refused"])
        lines.append(f"REFUSED: foreign GPU processes under policy 'refuse': {pids}")
    return "\n".join(lines)


def _restore(path: Path, args: argparse.Namespace) -> int:
    from daemon.cli.client import Client, daemon_url
    from daemon.store import db

    if args.file is None:
        print("k25-ctl db restore FILE: name the backup to restore", file=sys.stderr)
        return EXIT_USAGE
    try:
        Client(args.url or daemon_url(load_settings()), None, timeout=5).get("/healthz")
    except (httpx.HTTPError, ApiError):
        pass  # not answering: stopped, as a restore needs
    else:
        print(
            "the daemon runs: stop it first (systemctl stop k25-ctl), restore, then start it", file=sys.stderr
        )
        return EXIT_BUSY
    try:
        kept, migrated = db.restore(path, args.file)
    except db.RestoreRefused as e:
        print(f"refused, nothing replaced: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{path}: restored from {args.file}" + (f" (migrated from {migrated})" if migrated else ""))
    print(f"the database it replaced: {kept}" if kept else "there was no database before")
    return EXIT_OK


def _cmd_db(args: argparse.Namespace) -> int:
    from daemon.store import db

    path = load_settings().database_path
    if args.action == "upgrade":
        db.private(path)  # as the daemon keeps it: 0600 in a 0700 folder
        db.upgrade(path)
        print(f"{path}: schema at head")
        return EXIT_OK
    if args.action == "restore":
        return _restore(path, args)
    if args.action == "backup":
        if not path.exists():
            print(f"{path}: no database to back up", file=sys.stderr)
            return EXIT_FAILED
        if not args.scheduled:
            print(db.backup(path))
            return EXIT_OK
        settings = load_settings()
        made = db.backup(path, settings.backups_path)
        gone = db.prune_backups(settings.backups_path, path.name, settings.backups_keep)
        print(
            f"{made} ({made.stat().st_size / 2**20:.1f} MiB); "
            f"removed {len(gone)} older beyond {settings.backups_keep}"
        )
        return EXIT_OK
    current, head = db.revisions(path)
    if current == head:
        print(f"{path}: at {head} (head)")
        return EXIT_OK
    print(f"{path}: at {current or 'no database yet'}, head {head}: needs `k25-ctl db upgrade`")
    return EXIT_FAILED


def _remote_commands(sub: Any) -> None:
    from daemon.cli import remote as r

    def add(name: str, func: Any, help_: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help_)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--url", help="the daemon (default: from the settings, or K25_URL)")
        p.set_defaults(func=func, remote=True)
        return p

    add("status", r.status, "host state, active profile, switch in progress, GPUs")
    add("profiles", r.profiles, "profiles with their unit state and validity")
    p = add("activate", r.activate, "switch to PROFILE")
    p.add_argument("profile")
    p.add_argument(
        "--wait", action="store_true", help="follow the switch to its end (exit 0 active, 3 failed)"
    )
    p.add_argument("--force", action="store_true", help="even if PROFILE is already active (no drain)")
    p.add_argument("--no-drain", action="store_true", help="stop the serving engine at once (cuts requests)")
    p.add_argument("--dry-run", action="store_true", help="say what the switch would do; do nothing")
    p = add("warm", r.warm, "read PROFILE's weight files into the page cache")
    p.add_argument("profile")
    p.add_argument("--wait", action="store_true", help="follow it with a progress bar")
    p = add("unpark", r.unpark, "stop the parked engine of PROFILE (frees its host RAM and GPU memory)")
    p.add_argument("profile")
    p = add("restore", r.activate, "switch back to the default profile")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--no-drain", action="store_true", help="stop the serving engine at once (cuts requests)")
    p = add("runs", r.runs, "recent runs")
    p.add_argument("--profile")
    p.add_argument("--limit", type=int, default=20)
    p = add("run", r.run, "one run with its events")
    p.add_argument("run_id", type=int)
    p = add("cancel", r.cancel, "cancel the run in progress")
    p.add_argument("run_id", type=int)
    from daemon.cli.bench import add_commands
    from daemon.cli.capture import add_commands as add_capture_commands
    from daemon.cli.gpus import add_gpu_commands
    from daemon.cli.results import add_commands as add_result_commands
    from daemon.cli.schedule import add_schedule_commands
    from daemon.cli.sweep import add_commands as add_sweep_commands

    add_commands(add)
    add_result_commands(add)
    add_schedule_commands(add)
    add_sweep_commands(add)
    add_capture_commands(add)
    add_gpu_commands(add)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="k25-ctl", description="control plane of a GPU inference host")
    sub = parser.add_subparsers(dest="command", required=True)

    _remote_commands(sub)

    add_host_commands(sub)

    p = sub.add_parser("launch", help="exec the engine of PROFILE (what engine units run)")
    p.add_argument("profile")
    p.set_defaults(func=_cmd_launch)

    p = sub.add_parser("check-profiles", help="validate the profiles folder and print each rendered argv")
    p.add_argument("--dir", type=Path)
    p.add_argument("--no-paths", action="store_true", help="do not check that model paths exist")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--no-engines", action="store_true", help="do not ask the installed engines for their flags"
    )
    p.set_defaults(func=check_profiles)

    p = sub.add_parser("db", help="the runs database")
    p.add_argument(
        "action",
        choices=("upgrade", "status", "backup", "restore"),
        help="upgrade: migrate the schema to the newest revision; status: exit 0 at the newest, 3 behind; "
        "backup: a consistent copy beside it (prints its path); restore FILE: replace it by a backup (the "
        "daemon stopped; the replaced one is kept)",
    )
    p.add_argument("file", nargs="?", type=Path, help="restore: the backup file")
    p.add_argument("--url", help="the daemon (restore checks that it is stopped)")
    p.add_argument(
        "--scheduled",
        action="store_true",
        help="backup: into backup_dir, keeping the newest backups_keep (k25-ctl-backup.timer runs it daily)",
    )
    p.set_defaults(func=_cmd_db)

    p = sub.add_parser("serve", help="run the daemon (what k25-ctl.service runs)")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser(
        "teardown", help="tear the GPUs down: SIGTERM/SIGKILL the victims, clean /dev/shm, verify"
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan, touch nothing")
    p.add_argument("--local", action="store_true", help="plan (or run) here, without the daemon")
    p.add_argument("--url", help="the daemon (default: from the settings, or K25_URL)")
    p.add_argument("--gpus", type=int, nargs="*", help="only these GPUs (default: all)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_teardown)
    sandbox_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, not as a traceback at interpreter exit
    except BrokenPipeError:
        # `k25-ctl status | head -1`: the reader left; say nothing more (Python docs' recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except ApiError as e:
        from daemon.cli.remote import exit_code

        return exit_code(e)
    except httpx.HTTPError as e:
        print(f"k25-ctl: cannot reach the daemon: {e}", file=sys.stderr)
        return EXIT_FAILED
    except K25Error as e:
        print(f"k25-ctl: {e}", file=sys.stderr)
        return EXIT_USAGE if e.status_code in (404, 422) else EXIT_FAILED
    return code


if __name__ == "__main__":
    sys.exit(main())
