"""A year of history (issue 70): a busy host's year written through the store layer into a real migrated
database (perf/year/writer.py: 20 switches a day, 5 experiments a week of 8 rounds x 3 levels x 200
requests, serving metric rows as the retention leaves them, captures, datasets), then measured:

- the file's size (and per simulated year, where --days is shorter);
- one retention pass over it (the daemon's own function), a migration from the previous schema head, an
  online backup and a restore (the functions `k25-ctl db backup` / `db restore` run);
- on two daemons side by side, each in its own sandbox, one over that year and one over an empty
  database: p50/p99 of every read endpoint the page and the CLI use, and the page's load in Chromium.

Targets: every read p99 <= 10 ms and the page <= 1 s over the year. Needs root (the sandboxes).
`python perf/history.py [--days 365] [--reads 300] [--pages 5] [--dir DIR]`"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "sandbox")]

from daemon.core.settings import Settings  # noqa: E402
from daemon.serving.retention import retention  # noqa: E402
from daemon.store import db  # noqa: E402
from daemon.store.queries import Store  # noqa: E402
from daemon.store.serving import ServingStore  # noqa: E402
from k25_sandbox import sandbox as sbx  # noqa: E402
from perf.year.reads import Timing, endpoints, page_loads, summary, time_reads  # noqa: E402
from perf.year.writer import Year, YearWriter  # noqa: E402

READ_P99_MS = 10.0
PAGE_S = 1.0


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if ".backup-" not in p.name)


def _timed(label: str, fn: object) -> float:
    began = time.perf_counter()
    fn()  # type: ignore[operator]
    took = time.perf_counter() - began
    print(f"  {label}: {took:.2f} s")
    return took


def _previous_head(path: Path) -> str:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config(path))
    head = script.get_revision(script.get_current_head() or "head")
    if head is None or not isinstance(head.down_revision, str):
        raise SystemExit("the migrations are not one linear history")
    return head.down_revision


def housekeeping(year_db: Path, folder: Path) -> None:
    """Retention, migration, backup and restore on the year's file (copies where they change it)."""
    os.environ["K25_CONFIG"] = str(folder / "absent.toml")  # the defaults, never this machine's settings
    settings = Settings(state_dir=year_db.parent)
    store = Store.open(year_db)
    _timed(
        "one retention pass (the daemon's, hourly)",
        lambda: asyncio.run(retention(ServingStore(store), settings)),
    )
    store.engine.dispose()
    mig = folder / "migration/k25.db"
    mig.parent.mkdir()
    shutil.copy(year_db, mig)
    previous = _previous_head(mig)
    db.downgrade(mig, previous)
    _timed(f"migration from the previous head ({previous} -> head)", lambda: db.upgrade(mig))
    shutil.rmtree(mig.parent)
    made: list[Path] = []
    _timed("online backup (k25-ctl db backup)", lambda: made.append(db.backup(year_db)))
    print(f"    {made[0].name}: {made[0].stat().st_size / 2**20:.0f} MiB")
    target = folder / "restored/k25.db"
    _timed("restore into an empty state folder (k25-ctl db restore)", lambda: db.restore(target, made[0]))
    shutil.rmtree(target.parent)
    made[0].unlink()


def measure(info: sbx.SandboxInfo, reads: int, pages: int) -> tuple[dict[str, Timing], list[float]]:
    with httpx.Client(base_url=info.url, timeout=60, headers={"Authorization": f"Bearer {info.token}"}) as c:
        timings = time_reads(c, endpoints(c), reads)
    return timings, page_loads(info.url, info.token, pages)


def daemons(year_db: Path, reads: int, pages: int) -> None:
    """The same reads on a daemon over the year and one over an empty database, side by side."""
    results = {}
    for label, state in (("year", year_db.parent), ("empty", None)):
        settings = {"state_dir": json.dumps(str(state))} if state else {}
        began = time.perf_counter()
        info = sbx.up(load_seconds=0.5, settings=settings, binds=(state,) if state else (), within_s=300)
        print(f"  daemon over the {label} database up in {time.perf_counter() - began:.1f} s")
        try:
            results[label] = measure(info, reads, pages)
        finally:
            sbx.down(info)
    (year, year_pages), (empty, empty_pages) = results["year"], results["empty"]
    print(f"\n  {'read':28} {'empty p50/p99 ms':>18} {'year p50/p99 ms':>18} {'year max':>9}")
    worst = 0.0
    for label in year:
        e, y = empty.get(label), year[label]
        worst = max(worst, y.p99_ms)
        flag = (
            ""
            if y.p99_ms <= READ_P99_MS and y.status == 200
            else f"  <-- over {READ_P99_MS:g} ms or {y.status}"
        )
        shown = f"{e.p50_ms:7.2f} / {e.p99_ms:7.2f}" if e else "   (none there)  "
        print(f"  {label:28} {shown:>18} {y.p50_ms:7.2f} / {y.p99_ms:7.2f} {y.max_ms:8.1f}{flag}")
    print(f"  worst read p99 over the year: {worst:.2f} ms (target <= {READ_P99_MS:g} ms)")
    print(f"  page load: empty {summary(empty_pages)}; year {summary(year_pages)} (target <= {PAGE_S:g} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument(
        "--reads", type=int, default=300, help="requests per endpoint (p99: the 3rd slowest of 300)"
    )
    ap.add_argument("--pages", type=int, default=5, help="page loads per daemon")
    ap.add_argument("--dir", type=Path, help="keep the year's database here (default: a temporary folder)")
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="k25-history-"))
    year_db = folder / "year/k25.db"
    try:
        if not year_db.exists():
            print(f"writing {args.days} days of history into {year_db} through the store layer ...")
            began = time.perf_counter()
            written = YearWriter(year_db, Year(days=args.days)).write()
            print(f"  written in {time.perf_counter() - began:.0f} s: {written}")
        size = _size(year_db)
        print(
            f"  database: {size / 2**20:.0f} MiB ({size / 2**20 * 365 / args.days:.0f} MiB per simulated year)"
        )
        housekeeping(year_db, folder)
        daemons(year_db, args.reads, args.pages)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
