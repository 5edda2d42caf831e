"""The capture sink and its table, on a real SQLite file: the token, the sample rate, the body limit, what
is kept of a request (never a header), the caps and the retention (oldest first, the totals kept without
summing the table), the export and a purge that leaves no text in the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.capture.sink import CaptureSink
from daemon.core.errors import AccessDenied, InvalidInput, NotFound
from daemon.core.settings import CaptureSettings
from daemon.store.capture import Caps, CaptureStore, NewCapture
from daemon.store.queries import Store

TOKEN = "capture-secret"


def _sink(tmp_path: Path, **settings: object) -> tuple[CaptureSink, CaptureStore, list[float]]:
    store = CaptureStore(Store.open(tmp_path / "k25.db"))
    draws = [0.1, 0.9, 0.3, 0.7]  # kept below the rate: with 0.5 every other one
    clock = [1000.0]
    cfg = CaptureSettings.model_validate({"enabled": True, "sample_rate": 0.5} | settings)

    def rng() -> float:
        draws.append(draws.pop(0))
        return draws[-1]

    return CaptureSink(settings=cfg, token=TOKEN, store=store, clock=lambda: clock[0], rng=rng), store, clock


def _offer(sink: CaptureSink, path: str, authorization: str | None, category: str | None, raw: bytes) -> bool:
    """One mirrored request as the sink's route hands it on: checked before its body is read, then kept
    (the body's size limit is the route's: tests/api/test_capture.py)."""
    return sink.keep(sink.check(path, authorization), category, raw)


def _body(prompt: str = "def f(): pass", **more: object) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 16, "api_key": "sk-no"} | more).encode()


async def test_the_sink_keeps_the_sampled_share_with_its_parameters_and_nothing_else(tmp_path: Path) -> None:
    sink, store, _ = _sink(tmp_path)
    sink.start()
    kept = [
        _offer(sink, "/capture/v1/completions", f"Bearer {TOKEN}", "code", _body(temperature=0.2, top_p=0.9))
        for _ in range(8)
    ]
    assert kept == [True, False] * 4
    chat = json.dumps({"messages": [{"role": "user", "content": "hi", "name": "x"}], "stop": "\n"}).encode()
    assert _offer(sink, "/capture/v1/chat/completions", f"bearer {TOKEN}", "Not A Name!", chat)
    await sink.flush()
    totals = store.totals()
    assert (totals.rows, dict(totals.categories)) == (5, {"code": 4, "-": 1})
    lines, _ = store.export_page(0)
    rows = [json.loads(line) for line in lines]
    assert rows[0] == {"at": 1000.0, "endpoint": "completions", "model": "m", "category": "code",
                       "prompt": "def f(): pass",
                       "params": {"temperature": 0.2, "top_p": 0.9, "max_tokens": 16}}  # fmt: skip
    assert rows[-1]["messages"] == [{"role": "user", "content": "hi"}]
    assert rows[-1]["params"] == {"stop": ["\n"]}
    assert "sk-no" not in "".join(lines)
    assert (sink.counts.received, sink.counts.kept, sink.counts.sampled_out) == (9, 5, 4)
    await sink.close()


async def test_the_sink_refuses_without_its_token_when_off_and_for_bad_bodies(tmp_path: Path) -> None:
    sink, store, _ = _sink(tmp_path, sample_rate=1.0, max_body_bytes=200)
    with pytest.raises(AccessDenied):
        _offer(sink, "/capture/v1/completions", None, None, _body())
    with pytest.raises(AccessDenied):
        _offer(sink, "/capture/v1/completions", "Bearer admin-token", None, _body())
    with pytest.raises(InvalidInput, match="not a completions request"):
        _offer(sink, "/capture/v1/completions", f"Bearer {TOKEN}", None, b'{"input": "embed me"}')
    with pytest.raises(NotFound):
        _offer(sink, "/capture/v1/embeddings", f"Bearer {TOKEN}", None, _body())
    off = CaptureSink(settings=CaptureSettings(), token=TOKEN, store=store)
    with pytest.raises(NotFound, match="capture is off"):
        _offer(off, "/capture/v1/completions", f"Bearer {TOKEN}", None, _body())
    no_token = CaptureSink(settings=CaptureSettings(enabled=True), token=None, store=store)
    with pytest.raises(AccessDenied, match="no capture token"):
        _offer(no_token, "/capture/v1/completions", f"Bearer {TOKEN}", None, _body())
    await sink.flush()
    assert store.totals().rows == 0


async def test_a_writer_far_behind_drops_new_requests_not_memory(tmp_path: Path) -> None:
    sink, store, _ = _sink(tmp_path, sample_rate=1.0, max_pending=3)  # not started: nothing is written
    kept = [_offer(sink, "/capture/v1/completions", f"Bearer {TOKEN}", None, _body()) for _ in range(5)]
    assert kept == [True, True, True, False, False]
    assert sink.counts.dropped_pending == 2
    await sink.close()  # what was accepted is written at the stop
    assert store.totals().rows == 3


def _new(at: float, size: int = 100, category: str = "chat") -> NewCapture:
    return NewCapture(at, "completions", "m", category, json.dumps({"prompt": "p" * size, "params": {}}))


def test_caps_and_retention_drop_the_oldest_first(tmp_path: Path) -> None:
    db = tmp_path / "k25.db"
    store = CaptureStore(Store.open(db))
    caps = Caps(max_rows=50, max_bytes=10_000_000, retention_s=3600)
    added = store.add([_new(1000.0 + i) for i in range(60)], caps, now=1100.0)
    assert (added.kept, added.dropped) == (60, 10)
    t = store.totals()
    assert (t.rows, t.oldest, t.newest) == (50, 1010.0, 1059.0)
    by_bytes = Caps(max_rows=1000, max_bytes=20 * _new(0).size, retention_s=3600)
    store.add([_new(2000.0, category="code")], by_bytes, now=2000.0)
    t = store.totals()
    assert (t.rows, t.bytes, t.newest) == (20, 20 * _new(0).size, 2000.0)
    assert dict(t.categories) == {"chat": 19, "code": 1}
    # Nothing new: the retention alone removes what aged out (the totals follow, never re-summed).
    store.add([], caps, now=1059.0 + 3600 + 0.5)
    t = store.totals()
    assert (t.rows, dict(t.categories)) == (1, {"code": 1})
    fresh = CaptureStore(Store.open(db))  # a restarted daemon reads the same totals from the table
    assert fresh.totals() == t


def test_a_purge_leaves_no_captured_text_in_the_files(tmp_path: Path) -> None:
    db = tmp_path / "k25.db"
    store = CaptureStore(Store.open(db))
    marker = "zebracorn-" * 40
    store.add([_new(1.0 + i, 10) for i in range(20)] + [NewCapture(30.0, "chat", None, None,
              json.dumps({"messages": [{"role": "user", "content": marker}], "params": {}}))],
              Caps(1000, 10**9, 10**9), now=31.0)  # fmt: skip
    assert any(marker.encode() in p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert store.purge() == 21
    assert store.totals().rows == 0
    for p in tmp_path.iterdir():
        if p.is_file():
            assert marker[:30].encode() not in p.read_bytes(), p.name


def test_a_deleted_dataset_leaves_no_prompt_in_the_files(tmp_path: Path) -> None:
    """The dataset delete keeps the purge's promise: the captured text leaves the database's files (the
    main file and the WAL), read as bytes, not only the tables (issue 49: the WAL kept the zeroed pages
    and the main file the old ones until a checkpoint)."""
    from daemon.store.datasets import DatasetStore, NewPrompt
    from daemon.store.models import Dataset

    db = tmp_path / "k25.db"
    store = Store.open(db)
    datasets = DatasetStore(store)
    marker = "def merge_0(a, b): " + "zebracorn-" * 40
    body = json.dumps({"prompt": marker, "params": {}})
    head = Dataset(name="prod", source="capture", prompts=30, categories="{}", sha256="x", lengths="none")
    datasets.create(head, [NewPrompt("completions", body, "code", None, None) for _ in range(30)])
    store.engine.dispose()  # a checkpoint on close: the prompts are in the main file too, as after a restart
    assert marker.encode() in db.read_bytes()
    assert DatasetStore(Store.open(db)).delete("prod") == 30
    for p in tmp_path.iterdir():
        if p.is_file():
            assert marker[:30].encode() not in p.read_bytes(), p.name
