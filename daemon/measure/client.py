"""The benchmark client: streamed OpenAI requests over httpx, at fixed concurrency or Poisson arrivals
(with an optional cap on requests in flight). Every request ends as a record: failed, cut and timed-out
ones are counted, never dropped."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from daemon.core.jsontypes import RequestBody
from daemon.measure.metrics import RequestRecord, Status, StreamReader


@dataclass(frozen=True)
class Request:
    url: str
    body: RequestBody


@dataclass
class LevelResult:
    records: list[RequestRecord]
    duration: float  # first dispatch -> last completion (failed requests included)
    sent: int = 0  # an open stream's requests sent (those cut off at its end have no record)


ARRIVAL_BLOCK = 16  # an open stream's arrivals come at exactly its rate over each block of this many
SENT = "k25_sent"  # the request extension that holds when the transport took the request (perf_counter)


def new_client(timeout_s: float, connections: int) -> httpx.AsyncClient:
    """httpx over aiohttp's transport: its C HTTP parser costs a fraction of h11's per streamed chunk; that
    lets one core follow 20,000+ tokens/s without skewing the timestamps (perf/client_accuracy.py)."""
    from daemon.measure.transport import VllmLikeTransport  # aiohttp: 0.2 s of CPU, on a benchmark only

    return httpx.AsyncClient(
        transport=VllmLikeTransport(connections, SENT), timeout=httpx.Timeout(timeout_s, connect=10.0)
    )


async def send(
    client: httpx.AsyncClient, req: Request, index: int, t0: float, timeout_s: float
) -> RequestRecord:
    """One streamed request, read to its end; times relative to `t0` (perf_counter)."""
    clock = time.perf_counter
    reader = StreamReader(RequestRecord(index=index, sent=clock() - t0))
    try:
        async with asyncio.timeout(timeout_s):
            async with client.stream("POST", req.url, json=req.body) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")[:300]
                    return reader.finish(status=Status.HTTP, error=f"HTTP {r.status_code}: {text}")
                if (handed := r.request.extensions.get(SENT)) is not None:
                    reader.r.sent = handed - t0  # TTFT from where vLLM starts its clock (see the transport)
                buf = b""
                async for chunk in r.aiter_bytes():
                    # SSE by hand (bytes, not decoded lines): at 20k tokens/s the client's cost per event
                    # is what keeps its timestamps honest. An event ends with a blank line.
                    buf += chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
                    while (end := buf.find(b"\n\n")) >= 0:
                        event, buf = buf[:end], buf[end + 2 :]
                        for line in event.split(b"\n"):
                            if line.startswith(b"data:"):
                                reader.feed(line[5:].decode(), clock() - t0)
    except TimeoutError:
        return reader.finish(status=Status.TIMEOUT, error=f"no end within {timeout_s:g}s")
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        return reader.finish(status=Status.CONNECT, error=f"cannot connect: {e}")
    except httpx.HTTPError as e:  # the server went away mid-stream
        return reader.finish(status=Status.CUT, error=f"stream broken: {type(e).__name__}: {e}")
    return reader.finish()


def arrival_schedule(n: int, rate: float | None, seed: int) -> list[float]:
    """Seconds from the level's start at which each of `n` requests arrives: all at 0 without a rate, else
    Poisson arrivals as `vllm bench serve` draws them: exponential gaps (the first one too), the whole
    schedule scaled so that the last arrives at exactly n / rate. Unscaled, the span of 32 arrivals at 2 req/s
    swings by +-18% from draw to draw, and throughput at a rate with it (found beside `vllm bench serve`)."""
    if not rate or n == 0:
        return [0.0] * n
    rng = random.Random(seed)  # noqa: S311 - a reproducible arrival schedule
    cumulative = list(itertools.accumulate(rng.expovariate(rate) for _ in range(n)))
    scale = n / rate / cumulative[-1]
    return [at * scale for at in cumulative]


def open_arrivals(rate: float, seed: int) -> Iterator[float]:
    """An open stream's arrival times (seconds from its start): Poisson arrivals drawn as
    `arrival_schedule` draws a level's, in blocks of `ARRIVAL_BLOCK` whose spans are scaled to exactly
    ARRIVAL_BLOCK / rate. Unscaled, a window of 30 arrivals at 6 req/s came in at 4.3 req/s for one seed,
    an engine that serves 4.2 kept up with it, and a step called an over-saturated rate met."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible arrival schedule
    start = 0.0
    while True:
        gaps = list(itertools.accumulate(rng.expovariate(rate) for _ in range(ARRIVAL_BLOCK)))
        scale = ARRIVAL_BLOCK / rate / gaps[-1]
        yield from (start + at * scale for at in gaps)
        start += ARRIVAL_BLOCK / rate


async def run_level(
    client: httpx.AsyncClient,
    requests: list[Request],
    *,
    concurrency: int | None,
    rate: float | None,
    timeout_s: float,
    seed: int = 0,
    on_done: Callable[[RequestRecord], None] | None = None,
    arrivals: list[float] | None = None,
) -> LevelResult:
    """Fixed concurrency (`rate` None), Poisson arrivals at `rate` req/s, or the given `arrivals` (seconds
    from the level's start: a captured pattern), capped by `concurrency`."""
    t0 = time.perf_counter()
    gate = asyncio.Semaphore(concurrency or len(requests) or 1)
    records: list[RequestRecord] = [RequestRecord(index=i, sent=0.0) for i in range(len(requests))]
    paced = arrivals is not None
    at = arrivals if arrivals is not None else arrival_schedule(len(requests), rate, seed)

    async def one(i: int, req: Request) -> None:
        if rate or paced:
            # The schedule is absolute (t0 + arrival): a late wake-up never shifts the later arrivals.
            await asyncio.sleep(max(0.0, t0 + at[i] - time.perf_counter()))
        async with gate:
            rec = await send(client, req, i, t0, timeout_s)
        records[i] = rec
        if on_done is not None:
            on_done(rec)

    async with asyncio.TaskGroup() as tg:
        for i, req in enumerate(requests):
            tg.create_task(one(i, req))
    return LevelResult(records, time.perf_counter() - t0)


async def run_stream(
    client: httpx.AsyncClient,
    request_for: Callable[[int], Request],
    *,
    rate: float,
    concurrency: int | None,
    timeout_s: float,
    seed: int,
    most: int,
    until: Callable[[RequestRecord], bool],
    on_done: Callable[[RequestRecord], None] | None = None,
) -> LevelResult:
    """An open stream of Poisson arrivals at `rate` req/s (request i is `request_for(i)`), capped by
    `concurrency`, that goes on until `until` (told of each request as it ends) says the step is done, or
    `most` requests were sent and all ended. The requests still running then are cancelled: they arrived
    after what was measured. The records are those that ended, in the order they ended."""
    t0 = time.perf_counter()
    arrivals = open_arrivals(rate, seed)
    gate = asyncio.Semaphore(concurrency or most)
    records: list[RequestRecord] = []
    done = asyncio.Event()

    async def one(i: int) -> None:
        async with gate:
            rec = await send(client, request_for(i), i, t0, timeout_s)
        records.append(rec)
        if on_done is not None:
            on_done(rec)
        if until(rec):
            done.set()

    async with asyncio.TaskGroup() as tg:
        running: list[asyncio.Task[None]] = []
        for i, at in zip(range(most), arrivals, strict=False):
            try:  # the next arrival, unless the step is done first
                async with asyncio.timeout(max(0.0, t0 + at - time.perf_counter())):
                    await done.wait()
                break
            except TimeoutError:
                running.append(tg.create_task(one(i)))
        await _either(done, running)
        for task in running:
            task.cancel()
    return LevelResult(records, time.perf_counter() - t0, len(running))


async def _either(done: asyncio.Event, tasks: list[asyncio.Task[None]]) -> None:
    """Until the step is done or every request sent has ended."""
    waiter: asyncio.Task[object] = asyncio.ensure_future(done.wait())
    pending: set[asyncio.Task[object]] = {waiter, *(t for t in tasks if not t.done())}
    try:
        while waiter in pending and len(pending) > 1:
            _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
