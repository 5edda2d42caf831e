"""What one streamed request measured, and the aggregates over a level, exactly as `vllm bench serve`
defines them (docs/engines.md, "Benchmark definitions"), plus ITL per token and per-stream decode rate.
Pure: no I/O, no clock; times are seconds relative to the level's start.

Decisions (documented in docs/benchmarks.md):
- TTFT is the first chunk that carries generated text. SGLang's (and vLLM chat's) empty role chunk is not a
  token and is ignored; on /v1/completions this is exactly vLLM's definition.
- ITL pools every gap between consecutive chunks after the first token, text or not (vLLM: one sample per
  chunk with choices). ITL per token divides each gap among the tokens its chunk carries (continuous usage
  stats; a chunk without a token passes its time on to the next), or evenly when the engine did not say
  (labelled `itl_per_token_split`).
- Output tokens come from `usage.completion_tokens`; without usage, from the chunks (one per chunk),
  counted in `tokens_from_chunks`."""

from __future__ import annotations

import enum
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from daemon.core.jsontypes import RequestRow, StoredJson, VllmSummary

PERCENTILES = (90, 95, 99)


class Status(enum.StrEnum):
    OK = "ok"
    HTTP = "http_error"  # the engine answered with an error status or an error object
    CUT = "cut"  # the stream ended without [DONE]
    TIMEOUT = "timeout"
    CONNECT = "connect_error"
    EMPTY = "empty"  # the stream finished without a single token


@dataclass
class RequestRecord:
    index: int
    sent: float  # when the request was sent, seconds since the level began
    status: Status = Status.OK
    error: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    tokens_from_usage: bool = False
    ttft: float | None = None
    e2el: float | None = None
    gaps: list[float] = field(default_factory=list)  # between consecutive chunks after the first token
    chunk_tokens: list[int] | None = None  # tokens per chunk, when usage came with every chunk

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (vllm bench serve's per-request TPOT); None: one token."""
        if self.output_tokens <= 1 or self.e2el is None or self.ttft is None:
            return None
        return (self.e2el - self.ttft) / (self.output_tokens - 1)

    @property
    def chunk_times(self) -> list[float]:
        """Arrival of each chunk after the first token (and of the first), seconds since the level began."""
        if self.ttft is None:
            return []
        times = [self.sent + self.ttft]
        for g in self.gaps:
            times.append(times[-1] + g)
        return times

    def to_row(self) -> RequestRow:
        return {
            "i": self.index,
            "sent": round(self.sent, 6),
            "status": self.status,
            "error": self.error,
            "in": self.prompt_tokens,
            "out": self.output_tokens,
            "usage": self.tokens_from_usage,
            "ttft": self.ttft,
            "e2el": self.e2el,
            "gaps": [round(g, 6) for g in self.gaps],
            "chunk_tokens": self.chunk_tokens,
        }


class StreamReader:
    """Feeds one request's SSE `data:` payloads (with their arrival time) into a RequestRecord."""

    def __init__(self, record: RequestRecord) -> None:
        self.r = record
        self.done = False
        self._last: float | None = None  # arrival of the newest chunk since the first token
        self._chunks = 0
        self._usage_seen = 0  # completion tokens reported so far (continuous usage stats)
        self._per_chunk: list[int] = []
        self._per_chunk_known = True

    def feed(self, data: str, at: float) -> None:
        """`at`: arrival, seconds since the level began."""
        data = data.strip()
        if data == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            self._fail(Status.HTTP, f"not JSON: {data[:120]}")
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error"):
            err = obj["error"]
            self._fail(Status.HTTP, str(err.get("message", err) if isinstance(err, dict) else err)[:300])
            return
        usage = obj.get("usage")
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(usage, dict) and usage.get("prompt_tokens") is not None:
            self.r.prompt_tokens = int(usage["prompt_tokens"])
        choices = obj.get("choices") or ()
        # The first token is the first chunk that carries one, as `vllm bench serve` counts: with usage per
        # chunk, the first whose completion count grew; without, the first completions choice even when its
        # text is empty (a token whose bytes do not complete a character yet), never SGLang's chat role chunk.
        # Waiting for the first text instead put a later token's arrival in TTFT (measured against `vllm bench
        # serve`). After it every chunk with choices is an ITL sample and moves E2EL.
        token = completion > self._usage_seen if completion is not None else any(map(_carries, choices))
        if choices and (token or self._last is not None):
            self._chunk(at, completion)
        if completion is not None:
            self.r.output_tokens, self.r.tokens_from_usage = int(completion), True

    def _chunk(self, at: float, completion: int | None) -> None:
        if self._last is None:
            self.r.ttft = at - self.r.sent
        else:
            self.r.gaps.append(at - self._last)
        self._last = at
        self._chunks += 1
        self.r.e2el = at - self.r.sent
        if completion is None:
            self._per_chunk_known = False
        else:
            self._per_chunk.append(int(completion) - self._usage_seen)
            self._usage_seen = int(completion)

    def _fail(self, status: Status, error: str) -> None:
        if self.r.status == Status.OK:
            self.r.status, self.r.error = status, error

    def finish(self, *, status: Status | None = None, error: str | None = None) -> RequestRecord:
        """The stream ended (or failed with `status`): settle the record."""
        r = self.r
        if status is not None:
            self._fail(status, error or status)
        elif r.status == Status.OK and not self.done:
            self._fail(Status.CUT, f"stream ended without [DONE] after {self._chunks} chunk(s)")
        if r.status == Status.OK and self._chunks == 0:
            self._fail(Status.EMPTY, "the stream finished without generating a token")
        if not r.tokens_from_usage:
            r.output_tokens = self._chunks  # the labelled fallback: one token per chunk
        if self._per_chunk_known and self._chunks and sum(self._per_chunk) <= r.output_tokens:
            r.chunk_tokens = self._per_chunk  # a last token without text (EOS) may follow the last chunk
        return r


def _carries(choice: Any) -> bool:
    """A choice with a token in it: text, chat content, or a completions choice whose text is empty."""
    return _text(choice) or (isinstance(choice, dict) and "text" in choice)


def _text(choice: Any) -> bool:
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta") or {}
    return bool(choice.get("text") or delta.get("content") or delta.get("reasoning_content"))


def percentile(values: list[float], p: float) -> float:
    """numpy's default (linear interpolation between closest ranks), as vLLM's bench uses."""
    s = sorted(values)
    pos = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(name: str, values_s: list[float]) -> dict[str, float | None]:
    """mean/median/std/pXX of one metric in milliseconds (None when there are no samples)."""
    keys = ["mean", "median", "std", *(f"p{p}" for p in PERCENTILES)]
    if not values_s:
        return {f"{k}_{name}_ms": None for k in keys}
    ms = [v * 1000.0 for v in values_s]
    mean = sum(ms) / len(ms)
    out: dict[str, float | None] = {
        f"mean_{name}_ms": mean,
        f"median_{name}_ms": percentile(ms, 50),
        f"std_{name}_ms": math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms)),  # numpy: ddof 0
    }
    out |= {f"p{p}_{name}_ms": percentile(ms, p) for p in PERCENTILES}
    return out


def itl_per_token(r: RequestRecord) -> tuple[list[float], bool]:
    """Each gap divided among the tokens its chunk carries, one sample per token; (samples, split evenly)."""
    if not r.gaps:
        return [], False
    if r.chunk_tokens is not None:
        out: list[float] = []
        carry = 0.0  # the time of chunks that brought no token belongs to the next token
        for gap, k in zip(r.gaps, r.chunk_tokens[1:], strict=False):
            carry += gap
            if k > 0:
                out += [carry / k] * k
                carry = 0.0
        return out, False
    per_chunk = (r.output_tokens - 1) / len(r.gaps) if r.output_tokens > 1 else 1.0
    return [g / max(per_chunk, 1e-9) for g in r.gaps], True


def summarize(records: list[RequestRecord], duration: float) -> VllmSummary:
    """One level's aggregates with `vllm bench serve`'s key names (and k25-ctl's extras)."""
    done = [r for r in records if r.ok]
    n_out = sum(r.output_tokens for r in done)
    n_in = sum(r.prompt_tokens or 0 for r in done)
    ttft = [r.ttft for r in done if r.ttft is not None]
    e2el = [r.e2el for r in done if r.e2el is not None]
    tpot = [t for r in done if (t := r.tpot) is not None]
    itl = [g for r in done for g in r.gaps]
    per_token: list[float] = []
    split = False
    for r in done:
        samples, evenly = itl_per_token(r)
        per_token += samples
        split = split or evenly
    decode = [1.0 / t for t in tpot if t > 0]
    failures = Counter(r.status for r in records if not r.ok)
    out: VllmSummary = {
        "duration": duration,
        "completed": len(done),
        "failed": len(records) - len(done),
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "request_throughput": len(done) / duration if duration > 0 else 0.0,
        "output_throughput": n_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (n_in + n_out) / duration if duration > 0 else 0.0,
        "max_output_tokens_per_s": _max_tokens_per_s(done),
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        out |= stats(name, values)
    out |= stats("itl_per_token", per_token)
    out["itl_per_token_split"] = split
    out["mean_decode_tok_s"] = sum(decode) / len(decode) if decode else None  # one stream's decode speed
    out["tokens_from_chunks"] = sum(1 for r in done if not r.tokens_from_usage)
    out["failures"] = dict(failures)
    out["errors"] = sorted({r.error for r in records if r.error})[:10]
    return out


def decode_chunks(r: RequestRecord) -> list[int]:
    """Tokens per decode step of one request, from its chunks (usage on every chunk): the first chunk (the
    prefill's token) and the last (cut short by max_tokens) left out. An engine streams each step's tokens
    as one chunk, so a speculative step shows 1 + its accepted drafts; vLLM may merge steps into one chunk
    when the client falls behind, which only raises the figure."""
    return r.chunk_tokens[1:-1] if r.chunk_tokens and len(r.chunk_tokens) > 2 else []


def by_category(records: list[RequestRecord], categories: list[str], drafts: int | None) -> StoredJson:
    """Per prompt category: requests, per-stream throughput (a category's output tokens over its requests'
    own time: comparable across profiles, unlike its share of the level's), TTFT, TPOT, and acceptance
    length and rate from the streams' chunks (`drafts` tokens drafted a step; the engine's counters cannot
    tell categories apart)."""
    out: StoredJson = {}
    for cat in sorted(set(categories)):
        mine = [r for r, c in zip(records, categories, strict=True) if c == cat]
        done = [r for r in mine if r.ok and r.e2el]
        seconds = sum(r.e2el or 0.0 for r in done)
        tpot = [t for r in done if (t := r.tpot) is not None]
        steps = [k for r in done for k in decode_chunks(r)]
        length = sum(steps) / len(steps) if steps else None
        out[cat] = {
            "requests": len(mine),
            "completed": len(done),
            "output_tokens": sum(r.output_tokens for r in done),
            "stream_tok_s": sum(r.output_tokens for r in done) / seconds if seconds > 0 else None,
            "median_ttft_ms": _median_ms([r.ttft for r in done if r.ttft is not None]),
            "median_tpot_ms": _median_ms(tpot),
            "acceptance_length": length,
            "acceptance_rate": (length - 1) / drafts if length is not None and drafts else None,
        }
    return out


def _median_ms(values: list[float]) -> float | None:
    return percentile(values, 50) * 1000.0 if values else None


def _max_tokens_per_s(done: list[RequestRecord]) -> float:
    """The most output tokens that arrived within one wall-clock second (vLLM's max_output_tokens_per_s)."""
    buckets: Counter[int] = Counter()
    for r in done:
        times = r.chunk_times
        if not times:
            continue
        if r.chunk_tokens is not None and len(r.chunk_tokens) == len(times):
            tokens: list[float] = [float(k) for k in r.chunk_tokens]
        else:
            tokens = [r.output_tokens / len(times)] * len(times)
        for t, k in zip(times, tokens, strict=True):
            buckets[int(t)] += k  # type: ignore[assignment]
    return float(max(buckets.values())) if buckets else 0.0
