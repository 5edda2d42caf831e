"""The comparison's verdicts from per-request figures (verdicts that say how sure they are), pure: each
profile's requests against the baseline's, pooled over its repeats, round by round, judged by the one judge
(experiments/metric_judge.py). Output throughput (the requests' tokens over their seconds), TTFT, TPOT, ITL
and E2E latency. A row without enough requests keeps the noise-band verdict."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from daemon.core.jsontypes import RequestRow
from daemon.experiments import stats
from daemon.experiments.compare import Comparison, Row
from daemon.experiments.metric_judge import LOWER_IS_BETTER, Figures, judge
from daemon.experiments.verdict_types import Judged

# metric -> one figure per completed request; "tokens" and "seconds" paired (a request that generated
# tokens), "throughput" each such request's own rate (for a drift over rounds)
Samples = dict[str, list[float]]
FIGURES = ("tokens", "seconds", *LOWER_IS_BETTER)


def samples_of(rows: Sequence[RequestRow]) -> Samples:
    """One level's request rows (as stored) as per-request figures; failed requests count in none."""
    out: Samples = {m: [] for m in FIGURES}
    for r in rows:
        if r.get("status", "ok") != "ok" or not r.get("e2el") or r.get("ttft") is None:
            continue
        e2el, ttft, tokens = float(r["e2el"]), float(r["ttft"]), int(r.get("out") or 0)
        out["e2el"].append(e2el)
        out["ttft"].append(ttft)
        if tokens > 0:
            out["throughput"].append(tokens / e2el)
            out["tokens"].append(float(tokens))
            out["seconds"].append(e2el)
        if tokens > 1:
            out["tpot"].append((e2el - ttft) / (tokens - 1))
        if gaps := r.get("gaps"):
            out["itl"].append(sum(gaps) / len(gaps))
    return out


Sizes = dict[str, list[int]]  # metric -> its figures in each round


def by_round(rounds: Sequence[Sequence[int]], by_run: Mapping[int, Samples]) -> tuple[Samples, Sizes]:
    """The figures of the rounds' runs pooled, round after round, and how many each round gave."""
    out: Samples = {m: [] for m in FIGURES}
    sizes: Sizes = {m: [] for m in FIGURES}
    for run_ids in rounds:
        for m in out:
            before = len(out[m])
            for rid in run_ids:
                out[m].extend(by_run.get(rid, {}).get(m, []))
            sizes[m].append(len(out[m]) - before)
    return out, sizes


@dataclass(frozen=True)
class DriftNote:
    profile: str
    per_round: float
    p_value: float
    rounds: int

    def text(self) -> str:
        return (
            f"drift: {self.profile}'s own per-request throughput moved {100 * self.per_round:+.1f}% a round "
            f"over {self.rounds} rounds (p = {self.p_value:.3g}); interleaved rounds spread it over every "
            "profile, but the host is not steady"
        )


Judgements = dict[str, Judged]  # metric -> its judgement
ONE_ROUND = (
    "one round a side: the intervals cover request-to-request noise only, not what the requests of one "
    "round share (the host's load that minute, the engine's state); --rounds 2 or more measures that too"
)
# The same benchmarks judged again (a page refreshing /compare) give the same answer: kept by run ids.
Memo = dict[tuple[tuple[int, ...], tuple[int, ...]], Judgements]


def judge_rows(c: Comparison, by_run: Mapping[int, Samples], memo: Memo | None = None) -> None:
    """Each row's judged metrics and, where per-request figures are enough, its verdict from them."""
    base = next((r for r in c.rows if r.profile == c.baseline), None)
    if base is None:
        return
    base_samples = by_round(base.rounds or [base.run_ids], by_run)
    scopes = set()
    for row in c.rows:
        if row is base:
            continue
        key = (tuple(sorted(base.run_ids)), tuple(sorted(row.run_ids)))
        judged = memo.get(key) if memo is not None else None
        if judged is None:
            judged = _judge(base_samples, by_round(row.rounds or [row.run_ids], by_run))
            if memo is not None:
                memo[key] = judged
        row.judged = judged
        row.judged_text = {metric: j.text() for metric, j in judged.items()}
        if (j := judged.get("throughput")) is not None:
            row.verdict, row.verdict_text = j.verdict, j.text()
            scopes.add(j.scope)
    if "requests" in scopes:
        c.notes.append(ONE_ROUND)
    if (note := drift_of(base, by_run)) is not None:
        c.notes.append(note.text())


def _judge(base: Figures, mine: Figures) -> Judgements:
    return {metric: j for metric in LOWER_IS_BETTER if (j := judge(metric, base, mine)) is not None}


def drift_of(row: Row, by_run: Mapping[int, Samples]) -> DriftNote | None:
    """A trend in a profile's own throughput over its benchmarks (oldest first: the rounds), flagged."""
    rounds = [xs for rid in sorted(row.run_ids) if (xs := by_run.get(rid, {}).get("throughput"))]
    d = stats.drift(rounds)
    if d is None or not d.flagged:
        return None
    return DriftNote(row.profile, d.per_round, d.p_value, len(rounds))


def verdict_lines(c: Comparison) -> list[str]:
    """One line a profile (the experiment's last event, the CLI): 'eagle3: faster: 1.07x [1.04, 1.10]'."""
    out = []
    for row in c.rows:
        if row.profile == c.baseline or row.verdict is None:
            continue
        text = row.verdict_text or (
            f"{row.verdict}: {row.speedup:.2f}x (noise band ±{(row.noise or 0):.0%})"
            if row.speedup
            else row.verdict
        )
        out.append(f"{row.profile}: {text}")
    return out
