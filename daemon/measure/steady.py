"""A capacity step measured in its steady state, and sized for its SLO decision (pure).

A step that starts from an idle engine and drains it at the end measures its first and last requests beside
fewer others than the rate sustains: against an engine whose decode step grows 25% per running request, 60
requests read a mean TPOT about 10% below the steady state's, and the search answered a capacity 16% too
high. So a step is an open stream of Poisson arrivals, as GuideLLM measures one: the requests that arrive
while the engine fills (the warm-up) are not counted, the measured ones follow, and arrivals go on until the
last measured request has ended (no cool-down is counted: nothing drains while they run).

One sample of a mean TPOT varies by ~20% at 60 requests, and requests that share decode steps are not
independent. Each SLO figure gets an interval from a circular block bootstrap over the requests in arrival
order (blocks as long as the requests that run beside one another, Politis and Romano 1992), and the step
is decided only when every interval clears its bound: met when all lie within, missed when one lies above.
Otherwise the step is extended (twice the measured requests, up to the most allowed) and is `undecided`
when it reaches the most: its rate is then within the measurement's reach of the limit."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from daemon.measure.metrics import RequestRecord
from daemon.measure.slo import Bound, Slo

CONFIDENCE = 0.99  # each figure's interval, two-sided
RESAMPLES = 2000
BATCHES = 5  # a mean's interval: batch means of this many contiguous batches
TURNOVERS = 4  # a batch spans at least this many times the requests that run beside one another
MIN_WARM = 5  # requests left out of every step, however steady it looks
WARM_LATENCIES = 4.0  # and at least the requests that arrive within this many median latencies


class Decision(enum.StrEnum):
    MET = "met"
    MISSED = "missed"
    UNDECIDED = "undecided"  # an interval still holds the bound at the most requests a step may take


@dataclass(frozen=True)
class Interval:
    key: str  # the summary's key of the figure (mean_tpot_ms)
    low: float
    high: float
    bound: float

    def text(self) -> str:
        return f"{self.key} [{self.low:.1f}, {self.high:.1f}] vs {self.bound:g}"


def _stat(samples: np.ndarray, stat: str) -> np.ndarray:
    """One figure (mean, median, pNN; numpy's linear percentiles, as vLLM's bench) along the last axis."""
    if stat == "mean":
        return np.asarray(samples.mean(axis=-1))
    q = 50.0 if stat == "median" else float(stat.removeprefix("p"))
    return np.asarray(np.percentile(samples, q, axis=-1))


def block_interval(
    values: Sequence[float], stat: str, block: int, seed: int, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The `stat` of `values` (in arrival order) with a circular block bootstrap's percentile interval."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    block = max(1, min(block, n))
    rng = np.random.default_rng(seed)
    blocks = math.ceil(n / block)
    starts = rng.integers(0, n, size=(RESAMPLES, blocks))
    index = (starts[:, :, None] + np.arange(block)) % n
    samples = data[index.reshape(RESAMPLES, -1)[:, :n]]
    figures = _stat(samples, stat)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(figures, [tail, 1.0 - tail])
    return float(low), float(high)


def autocorrelation_time(values: Sequence[float], window: float = 5.0) -> float:
    """The integrated autocorrelation time of a series (in samples): 1 + 2 x the sum of its
    autocorrelations up to Sokal's automatic window, the smallest M with M >= `window` x tau(M) (Sokal 1997,
    as emcee's integrated_time). A stationary series of n samples holds about n / tau independent ones."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 4 or float(x.var()) == 0.0:
        return 1.0
    x = x - x.mean()
    f = np.fft.rfft(x, n=2 * n)
    acf = np.fft.irfft(f * np.conjugate(f))[:n]
    acf /= acf[0]
    taus = 2.0 * np.cumsum(acf) - 1.0
    ok = np.arange(n) >= window * taus
    m = int(np.argmax(ok)) if ok.any() else n - 1
    return float(max(1.0, taus[m]))


def overlap(latencies_s: Sequence[float], rate: float) -> int:
    """The requests that arrive while one runs (the rate x the median latency): they share an engine's
    steps and move together."""
    running = sorted(latencies_s)
    return max(1, math.ceil(rate * running[len(running) // 2])) if running else 1


def block_length(values: Sequence[float], latencies_s: Sequence[float], rate: float) -> int:
    """The bootstrap's block: twice the series' autocorrelation time, and never shorter than the requests
    that run beside one another."""
    return max(overlap(latencies_s, rate), math.ceil(2.0 * autocorrelation_time(values)))


def _seconds(r: RequestRecord, metric: str) -> float | None:
    if metric == "ttft":
        return r.ttft
    if metric == "tpot":
        return r.tpot  # a one-token request has none, as in the summary's figure
    return r.e2el


def batch_means_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The mean of a series with a batch-means interval (Schmeiser 1982): `BATCHES` contiguous batches, a
    t interval over their means on the log scale (a queue's excursions skew the means upward)."""
    data = np.asarray(values, dtype=float)
    size = len(data) // BATCHES
    means = data[: size * BATCHES].reshape(BATCHES, size).mean(axis=1)
    if size == 0 or (means <= 0).any():
        return float(data.mean()), float(data.mean())
    logs = np.log(means)
    from scipy import stats  # here: scipy.stats costs every daemon start ~0.5 s, and most never judge a level

    t = float(stats.t.ppf(0.5 + confidence / 2, BATCHES - 1))
    half = t * float(logs.std(ddof=1)) / math.sqrt(BATCHES)
    return float(np.exp(logs.mean() - half)), float(np.exp(logs.mean() + half))


def intervals(records: Sequence[RequestRecord], slo: Slo, rate: float, seed: int) -> list[Interval]:
    """Each SLO bound's figure over the measured requests, with its interval (ms)."""
    ok = [r for r in sorted(records, key=lambda r: r.index) if r.ok]
    latencies = [r.e2el for r in ok if r.e2el is not None]
    out = []
    for i, b in enumerate(slo.bounds):
        values = [v * 1000.0 for r in ok if (v := _seconds(r, b.metric)) is not None]
        if len(values) < 2:
            continue
        if b.stat == "mean":
            low, high = batch_means_interval(values)
        else:
            block = max(block_length(values, latencies, rate), len(values) // BATCHES)
            low, high = block_interval(values, b.stat, block, seed + i)
        out.append(Interval(b.key, low, high, b.ms))
    return out


def decide(found: Sequence[Interval], bounds: Sequence[Bound], errors_missed: bool) -> Decision:
    """Met when every interval lies within its bound; missed when one lies above it (or the failed share
    is over the SLO's); undecided otherwise (a bound without a figure is undecided too)."""
    if errors_missed or any(i.low > i.bound for i in found):
        return Decision.MISSED
    if len(found) == len(bounds) and all(i.high <= i.bound for i in found):
        return Decision.MET
    return Decision.UNDECIDED


def mser5(values: Sequence[float]) -> int:
    """Where a series' warm-up ends, by MSER-5 (White 1997; Hoad, Robinson and Davies 2010): over batch
    means of 5, the truncation (at most half the series) that leaves the mean with the smallest marginal
    standard error; in requests, a multiple of 5."""
    batches = np.asarray(values[: len(values) // 5 * 5], dtype=float).reshape(-1, 5).mean(axis=1)
    k = len(batches)
    if k < 4:
        return 0
    best, at = math.inf, 0
    for d in range(k // 2 + 1):
        rest = batches[d:]
        score = float(((rest - rest.mean()) ** 2).sum()) / (len(rest) ** 2)
        if score < best:
            best, at = score, d
    return at * 5


@dataclass
class Window:
    """Which requests of a step's open stream are measured: after the warm-up (MSER-5 over the latencies
    of the requests ended so far, in arrival order), `size` of them, doubled while the step is undecided,
    up to `most`."""

    rate: float
    size: int
    most: int
    warm: int | None = None

    def settle(self, latencies: Sequence[float]) -> None:
        """The latencies of the requests ended so far (every one from the first, in arrival order): the
        warm-up is fixed once the series holds `size` requests after it, and stays. It spans a few
        latencies (an engine fills over about that long) or MSER-5's truncation, the longer."""
        if self.warm is not None or len(latencies) < self.size + MIN_WARM:
            return
        filled = math.ceil(self.rate * WARM_LATENCIES * float(np.median(latencies)))
        warm = max(MIN_WARM, filled, mser5(latencies))
        if len(latencies) - warm >= self.size:
            self.warm = warm
        elif len(latencies) >= 2 * self.size + MIN_WARM:  # a queue that never settles: its latest stretch
            self.warm = len(latencies) - self.size

    @property
    def span(self) -> range | None:
        return None if self.warm is None else range(self.warm, self.warm + self.size)

    def extend(self) -> bool:
        """Measure more (twice as many, at most `most`); False: the step may take no more."""
        if self.size >= self.most:
            return False
        self.size = min(self.most, self.size * 2)
        return True


def steady_throughput(records: Sequence[RequestRecord], span: range) -> float:
    """Requests completed per second while the measured ones arrived (every request of the stream counts):
    the engine's rate of service in its steady state; 0 when it cannot be told."""
    sent = [r.sent for r in records if r.index in span]
    if len(sent) < 2:
        return 0.0
    start, end = min(sent), max(sent)
    if end <= start:
        return 0.0
    done = sum(1 for r in records if r.ok and r.e2el is not None and start <= r.sent + r.e2el <= end)
    return done / (end - start)


class Judge(Protocol):
    """A step's decision from its measured requests and every request that ended."""

    def saturated(self, measured: list[RequestRecord], ended: list[RequestRecord]) -> bool:
        """Whether the engine falls behind the arrivals (a miss that needs no more requests)."""

    def decide(self, measured: list[RequestRecord], ended: list[RequestRecord]) -> Decision: ...


class SteadyStep:
    """One step's progress as its requests end, in any order: when the warm-up is known, whether the
    measured requests are all in, what they decided, and so whether arrivals may stop."""

    def __init__(self, window: Window, judge: Judge) -> None:
        self.window = window
        self.judge = judge
        self.ended: dict[int, RequestRecord] = {}
        self.decision: Decision | None = None
        self._prefix = 0  # every request below this one has ended
        self._latencies: list[float] = []  # theirs, in arrival order (a failed one: the slowest yet)
        self._slowest = 0.0

    def end(self, rec: RequestRecord) -> bool:
        """One request ended; True when the step is done (its measured requests all in and decided, or
        undecided at the most it may take)."""
        self.ended[rec.index] = rec
        while self._prefix in self.ended:
            done = self.ended[self._prefix]
            # A failure weighs as the slowest request yet.
            latency = done.e2el if done.ok and done.e2el is not None else self._slowest
            self._slowest = max(self._slowest, latency)
            self._latencies.append(latency)
            self._prefix += 1
        self.window.settle(self._latencies)
        span = self.window.span
        while self.decision is None and span is not None and all(i in self.ended for i in span):
            measured, ended = self.measured, list(self.ended.values())
            if self.judge.saturated(measured, ended):
                self.decision = Decision.MISSED
                break
            if len(measured) < self.needed(measured) and self.window.extend():
                span = self.window.span
                continue
            decided = self.judge.decide(measured, ended)
            if decided is not Decision.UNDECIDED or not self.window.extend():
                self.decision = decided
            span = self.window.span
        return self.decision is not None

    def needed(self, measured: Sequence[RequestRecord]) -> int:
        """The fewest measured requests a decision may rest on: each batch spans `TURNOVERS` times the
        requests that run beside one another, since an engine's running set, and with it every request's
        pace, drifts over about that long (batches shorter than that move together, and their interval
        lies; 60 requests at 3.7 req/s read a mean TPOT of [19, 26] ms where the steady state is 35)."""
        return BATCHES * TURNOVERS * overlap([r.e2el for r in measured if r.ok and r.e2el], self.window.rate)

    @property
    def measured(self) -> list[RequestRecord]:
        span = self.window.span
        return [] if span is None else [self.ended[i] for i in span if i in self.ended]
