"""Where a test run's time went, from the file K25_TEST_TIMELINE names (tests/conftest.py writes it): each
worker's busy time and idle tail, and the modules by wall-clock time.

    K25_TEST_TIMELINE=/tmp/t.tsv bash scripts/test.sh; python perf/timeline.py /tmp/t.tsv
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    rows = [line.split("\t") for line in args.file.read_text().splitlines() if line.count("\t") == 3]
    start = min(float(r[1]) for r in rows)
    end = max(float(r[2]) for r in rows)
    busy: dict[str, float] = defaultdict(float)
    last: dict[str, float] = defaultdict(float)
    span: dict[str, list[float]] = {}
    for worker, b, e, nodeid in rows:
        busy[worker] += float(e) - float(b)
        last[worker] = max(last[worker], float(e))
        module = nodeid.split("::")[0]
        s = span.setdefault(module, [float(b), float(e), 0.0])
        s[0], s[1], s[2] = min(s[0], float(b)), max(s[1], float(e)), s[2] + float(e) - float(b)
    print(f"{len(rows)} tests over {end - start:.0f} s")
    for w in sorted(busy):
        print(
            f"  {w:5} busy {busy[w]:6.0f} s, done at {last[w] - start:5.0f} s (idle tail {end - last[w]:4.0f} s)"
        )
    print("modules by wall-clock time (start..end relative to the run's start):")
    for module, (b, e, t) in sorted(span.items(), key=lambda kv: -kv[1][2])[: args.top]:
        print(f"  {t:6.0f} s  {b - start:5.0f}..{e - start:5.0f}  {module}")


if __name__ == "__main__":
    main()
