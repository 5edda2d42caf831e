"""`k25-ctl host`: this host's park rates (measured by `k25-ctl host calibrate`, or the documented
defaults) and, for each profile that parks, what each way to park it costs: park and wake seconds and the
host RAM it holds. `host calibrate` measures the rates with the engine's own Python (torch), on this host,
as root; the daemon reads them from its state directory."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from daemon.cli.exit_codes import EXIT_OK, EXIT_USAGE
from daemon.core.settings import load_settings
from daemon.engines import engine_for
from daemon.engines.checks import load_checked_profiles
from daemon.host.calibration import interpreter_of, measure
from daemon.parking import costs, rates


def _rates_text(r: costs.HostRates) -> str:
    when = (
        f"measured {r.measured_at:%Y-%m-%d %H:%M} UTC"
        if r.measured_at
        else "defaults (k25-ctl host calibrate)"
    )

    def at(key: str) -> str:  # the median, and the range over the calibration's repeats
        low, high = r.ranges.get(key, (None, None))
        spread = f" [{low:.1f}-{high:.1f}]" if low is not None and high is not None else ""
        return f"{getattr(r, key):.1f}{spread}"

    return (
        f"rates    {when}, GiB/s (median [lowest-highest] of the repeats)\n"
        f"pin      one process {at('pin_process')}, all at once {at('pin_host')} (default allocator); "
        f"{at('pin_process_registered')} / {at('pin_host_registered')} registered\n"
        f"copy     GPU->host {at('device_to_host')}, host->GPU {at('host_to_device')} (per GPU)\n"
        f"reload   page cache {at('page_cache')} (per GPU), cold disk {at('disk')}"
    )


def _table(ways: list[costs.Way]) -> list[str]:
    rows = [f"  {'way':44} {'park s':>8} {'wake s':>8} {'host RAM':>10}"]
    for w in ways:
        rows.append(f"  {w.name:44} {w.park_s:8.1f} {w.wake_s:8.1f} {w.ram_bytes / 1e9:8.0f} GB")
    return rows


def show(args: argparse.Namespace) -> int:
    from daemon.host.pagecache import PageCache, mem_available
    from daemon.warming.warmer import Warmer

    s = load_settings()
    r = rates.load(s.state_dir)
    warmer = Warmer(PageCache(), mem_available=mem_available, reserve=0, workers=1, block=s.warm_block_bytes)
    parked = [lp.profile for lp in load_checked_profiles(s.profiles_path).valid.values() if lp.profile.park]
    each: dict[str, list[dict[str, object]]] = {}
    lines = [_rates_text(r)]
    for p in parked:
        size, resident = warmer.weights(p)
        shape = costs.Shape.of(p, size)
        ways = costs.ways(shape, r, resident=resident)
        each[p.name] = [dataclasses.asdict(w) for w in ways]
        lines.append(
            f"{p.name}: {size / 1e9:.1f} GB of weights, {resident:.0%} resident, "
            f"{shape.workers} workers on {shape.gpus} GPUs"
        )
        lines += _table(ways)
    out = {"rates": r.as_json(), "profiles": each}
    print(json.dumps(out, indent=2, default=str) if args.json else "\n".join(lines))
    return EXIT_OK


def calibrate(args: argparse.Namespace) -> int:
    s = load_settings()
    python = args.python
    if python is None and args.profile:
        lp = load_checked_profiles(s.profiles_path).valid.get(args.profile)
        if lp is None:
            print(f"k25-ctl: no valid profile {args.profile!r}", file=sys.stderr)
            return EXIT_USAGE
        python = interpreter_of(engine_for(lp.profile).argv(lp.profile))
    if python is None:
        print("k25-ctl: which Python runs the engine? --python PATH (or --profile NAME)", file=sys.stderr)
        return EXIT_USAGE
    threads = s.park_pin_threads
    measured = measure(
        python,
        gib=args.gib,
        processes=args.processes,
        threads=threads,
        file=args.file,
        timeout_s=args.timeout,
        repeats=args.repeats,
    )
    r = rates.save(s.state_dir, measured.rates, python=python, ranges=measured.ranges)
    print(json.dumps(r.as_json(), indent=2) if args.json else _rates_text(r))
    return EXIT_OK


def add_host_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("host", help="this host's park rates and what each way to park a profile costs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=show)
    hs = p.add_subparsers(dest="host_command")
    c = hs.add_parser("calibrate", help="measure the park rates with the engine's Python (torch), as root")
    c.add_argument("--profile", help="the profile whose engine's interpreter measures (default: --python)")
    c.add_argument("--python", help="the interpreter that runs the engine (has torch)")
    c.add_argument("--gib", type=float, default=8.0, help="bytes pinned and copied (GiB)")
    c.add_argument(
        "--processes", type=int, default=8, help="processes pinning at once (the engine's workers)"
    )
    on_disk = Path("/var/tmp/k25-calibrate.bin")  # noqa: S108 - on disk, not tmpfs: a cold read
    c.add_argument("--file", type=Path, default=on_disk, help="a file on disk")
    c.add_argument("--repeats", type=int, default=3, help="each rate measured this many times (its range)")
    c.add_argument("--timeout", type=float, default=1800.0)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=calibrate)
