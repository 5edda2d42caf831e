"""The capacity search against engines whose batching physics are known (tests/batching_sim.py: a decode
step grows `growth` per extra running request, 64-token requests), in simulated time: for each engine its
capacity under tpot_mean_ms=30 from long simulated streams, then `--seeds` searches of at most 8 steps. Each
row: the known capacity, how many estimates came within 10% of it, how many brackets held it, the median
and worst estimate error, the steps and measured requests per search.
`python perf/capacity_physics.py [--seeds 20] [--step-ms 10,11.5,13,13.5]`"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from daemon.measure.capacity import CapacitySearch
from daemon.measure.slo import parse
from tests.batching_sim import Physics, search, true_capacity


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--step-ms", default="10,11.5,13,13.5", help="one running request's decode step (ms)")
    ap.add_argument("--requests", type=int, default=60, help="measured requests a step starts with")
    args = ap.parse_args()
    slo, cfg = parse("tpot_mean_ms=30"), CapacitySearch(start_rate=1.0, resolution=0.1, max_steps=8)
    print(f"{'step ms':>7} {'known':>6} {'est<=10%':>8} {'held':>5} {'median err':>10} {'worst err':>9} "
          f"{'steps':>5} {'requests':>8}")  # fmt: skip
    for step_ms in (float(x) for x in args.step_ms.split(",")):
        physics = Physics(step_s=step_ms / 1000)
        known = true_capacity(physics, 30.0)
        errors, held, steps, requests = [], 0, [], []
        for seed in range(args.seeds):
            found = search(physics, cfg, slo, requests=args.requests, seed=seed)
            answer = found.result()
            errors.append(abs((answer.estimate or 0.0) / known - 1))
            held += (answer.capacity or 0.0) <= known <= (answer.lowest_missed or float("inf"))
            steps.append(len(found.steps))
            requests.append(sum(s.requests for s in found.steps))
        close = sum(e <= 0.10 for e in errors)
        print(
            f"{step_ms:>7.1f} {known:>6.2f} {close:>5}/{args.seeds:<2} {held:>2}/{args.seeds:<2} "
            f"{statistics.median(errors):>10.1%} {max(errors):>9.1%} {statistics.mean(steps):>5.1f} "
            f"{statistics.mean(requests):>8.0f}"
        )


if __name__ == "__main__":
    main()
