"""Datasets as a service: import a file, cut a captured window into a dataset, list, delete, and load one
for a benchmark to replay. A dataset is a copy: a purge of the capture or its retention leaves it as it
was, and its hash (a benchmark's prompt hash) never changes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from daemon.core.errors import InvalidInput
from daemon.core.jsontypes import RequestBody
from daemon.datasets.formats import CHARS_PER_TOKEN, Format, Imported, parse
from daemon.datasets.shapes import Endpoint
from daemon.store.capture import CaptureStore
from daemon.store.datasets import DatasetStore, NewPrompt, categories
from daemon.store.models import Dataset

log = logging.getLogger("k25.datasets")
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
RESERVED = ("builtin", "random", "custom")  # the benchmark's own prompt sources
Generated = Callable[[datetime, datetime], tuple[float, float]]  # (since, until) -> (requests, tokens)


@dataclass(frozen=True)
class ReplayPrompt:
    endpoint: Endpoint
    body: RequestBody  # {"prompt" | "messages", "params"}
    category: str | None
    output_tokens: int | None
    offset_s: float | None  # after the dataset's first arrival


@dataclass(frozen=True)
class Replay:
    """A dataset as a benchmark replays it."""

    name: str
    sha256: str
    lengths: str  # how its output lengths are known
    output_mean: float | None
    prompts: list[ReplayPrompt]

    @property
    def paced(self) -> bool:
        return all(p.offset_s is not None for p in self.prompts)


@dataclass(frozen=True)
class DatasetInfo:
    """What anyone may read of a dataset: counts, never its text."""

    name: str
    source: str
    created_at: datetime
    prompts: int
    categories: dict[str, int]
    sha256: str
    lengths: str  # how a replay chooses each request's output length
    output_mean: float | None
    window_start: datetime | None
    window_end: datetime | None


def check_name(name: str) -> None:
    if not re.match(NAME, name):
        raise InvalidInput(
            f"dataset name {name!r}: letters, digits, _ . - (at most 64; a letter or digit first)"
        )
    if name in RESERVED:
        raise InvalidInput(f"{name!r} is a built-in prompt source, not a dataset name")


class Datasets:
    def __init__(self, *, store: DatasetStore, captured: CaptureStore, generated: Generated) -> None:
        self.store = store
        self.captured = captured
        self.generated = generated

    async def import_file(self, name: str, data: bytes, fmt: Format | None) -> DatasetInfo:
        check_name(name)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidInput(f"the file is not UTF-8 (byte {e.start})") from None
        items = await asyncio.to_thread(parse, text, fmt)
        source = fmt or ("sharegpt" if items and text.lstrip().startswith("[") else "openai")
        known = sum(1 for i in items if i.output_tokens is not None)
        lengths = (
            "the request's max_tokens (the file gives no output_tokens)"
            if not known
            else f"per prompt: the reply's length at {CHARS_PER_TOKEN} characters a token"
            if source == "sharegpt"
            else "per prompt: the file's output_tokens"
            + ("" if known == len(items) else f" ({known} of {len(items)}; the rest: their max_tokens)")
        )
        first = min((i.at for i in items if i.at is not None), default=None)
        prompts = [_new(i, None if i.at is None or first is None else i.at - first) for i in items]
        head = _head(name, source, prompts, lengths, None)
        made = await asyncio.to_thread(self.store.create, head, prompts)
        log.info("dataset %s imported: %d prompts (%s)", name, made.prompts, source)
        return info(made)

    async def from_capture(
        self, name: str, since: datetime | None, until: datetime | None, only: list[str]
    ) -> DatasetInfo:
        """The captured requests of a window (all, by default) as a dataset, with the mean output length
        the serving engine generated over that window (its own counters): the mirror never sees a reply."""
        check_name(name)
        rows = await asyncio.to_thread(
            self.captured.window,
            None if since is None else since.timestamp(),
            None if until is None else until.timestamp(),
            only,
        )
        if not rows:
            raise InvalidInput(
                "no captured requests in that window" + (f" of {', '.join(only)}" if only else "")
            )
        start, end = rows[0].at, rows[-1].at
        requests, tokens = await asyncio.to_thread(
            self.generated, datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
        )
        mean = tokens / requests if requests >= 1 else None
        lengths = (
            f"the engine's mean over the captured window: {mean:.0f} tokens a request "
            f"({requests:.0f} requests)"
            if mean
            else "the request's max_tokens (no serving rows over the captured window)"
        )
        prompts = [NewPrompt(r.endpoint, r.body, r.category, None, r.at - start) for r in rows]
        head = _head(name, "capture", prompts, lengths, mean)
        head.window_start, head.window_end = start, end
        made = await asyncio.to_thread(self.store.create, head, prompts)
        log.info("dataset %s cut from the capture: %d requests over %.0f s", name, made.prompts, end - start)
        return info(made)

    async def all(self) -> list[DatasetInfo]:
        return [info(d) for d in await asyncio.to_thread(self.store.all)]

    async def get(self, name: str) -> DatasetInfo:
        return info(await asyncio.to_thread(self.store.get, name))

    async def delete(self, name: str) -> int:
        n = await asyncio.to_thread(self.store.delete, name)
        log.info("dataset %s deleted (%d prompts)", name, n)
        return n

    def replay(self, name: str) -> Replay:
        """Blocking: the dataset's prompts, as a benchmark sends them."""
        head = self.store.get(name)
        prompts = [
            ReplayPrompt(
                "chat" if p.endpoint == "chat" else "completions",
                json.loads(p.body),
                p.category,
                p.output_tokens,
                p.offset_s,
            )
            for p in self.store.prompts(int(head.id or 0))
        ]
        return Replay(head.name, head.sha256, head.lengths, head.output_mean, prompts)


def _new(i: Imported, offset: float | None) -> NewPrompt:
    return NewPrompt(
        i.endpoint, json.dumps(i.body, separators=(",", ":")), i.category, i.output_tokens, offset
    )


def _head(name: str, source: str, prompts: list[NewPrompt], lengths: str, mean: float | None) -> Dataset:
    h = hashlib.sha256()
    for p in prompts:
        h.update(json.dumps([p.endpoint, p.body, p.category, p.output_tokens, p.offset_s]).encode())
    cats = Counter(p.category or "-" for p in prompts)
    return Dataset(
        name=name,
        source=source,
        prompts=len(prompts),
        categories=json.dumps(dict(sorted(cats.items()))),
        sha256=h.hexdigest()[:16],
        lengths=lengths,
        output_mean=mean,
    )


def info(d: Dataset) -> DatasetInfo:
    def at(ts: float | None) -> datetime | None:
        return None if ts is None else datetime.fromtimestamp(ts, UTC)

    created = d.created_at if d.created_at.tzinfo else d.created_at.replace(tzinfo=UTC)
    return DatasetInfo(
        d.name,
        d.source,
        created,
        d.prompts,
        categories(d),
        d.sha256,
        d.lengths,
        d.output_mean,
        at(d.window_start),
        at(d.window_end),
    )
