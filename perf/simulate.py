"""The seeded simulation (issue 70): a random walk of an operator's and the world's actions against the real
daemon in a sandbox (activate good and faulty profiles, park and unpark, warm, benchmarks, experiments of 2
rounds, capacity searches, cancels and daemon SIGKILLs at drawn moments, engine crashes and hangs, a full
disk, concurrent clients), every invariant checked after every step (perf/sim/invariants.py). Needs root.

    python perf/simulate.py --steps 2000 [--seed 1]       long: steps/min, checks, the daemon's RSS and fds
    python perf/simulate.py --seed 7 --steps 50 --shrink NAME
        a failure prints its seed and trace; --shrink cuts it to the shortest failing trace and writes it to
        NAME.json in tests/system/sim_traces/ (a regression test: tests/system/test_sim_regressions.py)
    python perf/simulate.py --replay tests/system/sim_traces/unpark-outside-registry.json

The long run's first `--kills-until` steps (200) include daemon SIGKILLs; after them the daemon lives on,
so that its RSS and open files at step 200 and at the end compare one process's growth."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "sandbox")]

from perf.sim import plant  # noqa: E402
from perf.sim.shrink import shrink  # noqa: E402
from perf.sim.steps import Step, plan  # noqa: E402
from perf.sim.walk import Result, StepRecord, load_trace, save_trace, simulate, walk  # noqa: E402
from perf.sim.world import World, booted  # noqa: E402
from perf.watch import daemon_process  # noqa: E402

TRACES = ROOT / "tests/system/sim_traces"


def _footprint(world: World) -> tuple[int, int, int]:
    """The daemon's (pid, RSS bytes, open files)."""
    p = daemon_process(world.info)
    return p.pid, p.memory_info().rss, p.num_fds()


def _without_kills(steps: list[Step], after: int) -> list[Step]:
    """A daemon SIGKILL from step `after` on becomes the job it would have landed in, run to its end."""
    out = []
    for i, s in enumerate(steps):
        if i >= after and s.kind == "daemon_kill":
            s = dataclasses.replace(
                s, kind="job", args={"job": s.args.get("job"), "profile": s.args["profile"]}
            )
        out.append(s)
    return out


def long_run(steps: list[Step], seed: int, kills_until: int) -> Result:
    steps = _without_kills(steps, kills_until)
    marks: dict[str, tuple[int, int, int]] = {}
    began = time.monotonic()
    with booted() as world:

        def each(rec: StepRecord) -> None:
            if rec.index in (0, kills_until - 1, len(steps) - 1):
                marks[{0: "start", kills_until - 1: f"step {kills_until}"}.get(rec.index, "end")] = (
                    _footprint(world)
                )
            if rec.index % 50 == 49:
                rate = (rec.index + 1) / (time.monotonic() - began) * 60
                pid, rss, fds = _footprint(world)
                print(f"  step {rec.index + 1}: {rate:.1f} steps/min; daemon pid {pid}, RSS {rss / 2**20:.1f} MiB, "
                      f"{fds} open files", flush=True)  # fmt: skip

        result = walk(world, steps, on_step=each)
    minutes = (time.monotonic() - began) / 60
    done = len(result.records)
    print(f"seed {seed}: {done} steps in {minutes:.1f} min ({done / minutes:.1f} steps/min), "
          f"{result.checks} invariant checks passed, {len(result.violations)} violations")  # fmt: skip
    for name, (pid, rss, fds) in marks.items():
        print(f"  daemon at {name}: pid {pid}, RSS {rss / 2**20:.1f} MiB, {fds} open files")
    if (a := marks.get(f"step {kills_until}")) and (b := marks.get("end")) and a[0] == b[0]:
        print(f"  growth after step {kills_until} (one process): RSS {(b[1] - a[1]) / a[1]:+.1%}, "
              f"open files {b[2] - a[2]:+d}")  # fmt: skip
    kinds: dict[str, int] = {}
    for r in result.records:
        kinds[r.step.kind] = kinds.get(r.step.kind, 0) + 1
    print("  steps by kind: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--kills-until", type=int, default=200)
    ap.add_argument("--replay", type=Path, help="a trace file (tests/system/sim_traces/*.json)")
    ap.add_argument("--shrink", metavar="NAME", help="on a failure: shrink and write the trace as NAME")
    ap.add_argument("--attempts", type=int, default=2, help="replays of each shrink candidate")
    ap.add_argument("--traces", type=Path, default=TRACES, help="where --shrink writes")
    ap.add_argument(
        "--plant",
        metavar="DEFECT",
        help=f"run in a worktree of HEAD with a defect planted ({', '.join(plant.names())}), or none: HEAD as "
        "it is (a long run that edits here do not reach)",
    )
    args = ap.parse_args()
    # A stop by `kill` (a background job ignores SIGINT) unwinds like Ctrl-C: the sandbox goes down, its
    # tmpfs is unmounted (world.booted's finally); the planted run's child is stopped the same way.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.plant:
        tree, python = plant.prepare(args.plant)
        at = sys.argv.index("--plant")
        argv = sys.argv[1:at] + sys.argv[at + 2 :]
        with subprocess.Popen(
            [python, tree / "perf/simulate.py", *argv, "--traces", str(args.traces)]
        ) as child:
            try:
                sys.exit(child.wait())
            finally:
                if child.poll() is None:
                    child.terminate()
                    child.wait()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("k25.sim").setLevel(logging.INFO)
    steps = load_trace(args.replay) if args.replay else plan(args.seed, args.steps)
    if args.replay or args.steps < args.kills_until:
        result = simulate(steps)
        print(f"{result.trace()}\n{len(result.records)} steps, {result.checks} invariant checks passed")
    else:
        result = long_run(steps, args.seed, args.kills_until)
    if result.failed_at is None:
        return
    print(f"FAILED: seed {args.seed}, step {result.failed_at}: {result.signature()}\n{result.trace()}")
    if args.shrink:

        def fails(candidate: list[Step]) -> frozenset[str] | None:
            got = simulate(candidate)
            print(f"  candidate of {len(candidate)} steps: {sorted(got.signature()) or 'passes'}", flush=True)
            return got.signature() if got.failed_at is not None else None

        short = shrink(steps, result.failed_at, result.signature(), fails, attempts=args.attempts)
        args.traces.mkdir(exist_ok=True)
        path = args.traces / f"{args.shrink}.json"
        save_trace(path, short, why="; ".join(result.violations), seed=args.seed)
        print(f"shrunk to {len(short)} steps, written to {path}:")
        print("\n".join(f"  {s.text()}" for s in short))
    sys.exit(1)


if __name__ == "__main__":
    main()
