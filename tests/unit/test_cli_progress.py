"""Progress written to a pipe or the journal: phases, and a bar's line at each 10% (its first and its last
included), not one line per request or shard."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from daemon.cli import bench, remote


class FakeClient:
    """A run's events as the daemon streams them, and the run at its end."""

    def __init__(self, kind: str, events: list[dict[str, Any]]) -> None:
        self.kind, self._events = kind, events

    def get(self, path: str, **_: object) -> dict[str, Any]:
        return {"id": 9, "kind": self.kind, "outcome": "ok", "error": None}

    def events(self, path: str) -> Iterator[dict[str, Any]]:
        yield from self._events


def _progress(phase: str, total: int) -> list[dict[str, Any]]:
    return [
        {"phase": phase, "detail": "concurrency 1: measuring", "progress_percent": 100 * n // total,
         "progress_done": n, "progress_total": total}
        for n in range(1, total + 1)
    ]  # fmt: skip


def test_a_16_request_benchmark_through_a_pipe_prints_a_line_per_10_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    events = [{"phase": "created", "detail": "benchmark of baseline"}, *_progress("measuring", 16)]
    assert bench.follow(FakeClient("benchmark", events), 9, as_json=False) == "ok"  # type: ignore[arg-type]
    lines = capsys.readouterr().out.splitlines()
    bars = [line for line in lines if "concurrency 1" in line]
    assert bars[0].endswith("(1/16)")
    assert bars[-1].endswith("(16/16)")
    assert len(bars) == 11, bars  # 6% (the first), 12, 25, 31, 43, 50, 62, 75, 81, 93, 100: one per tenth
    assert len(lines) == 13  # the phase, the bars, the outcome: not 17 and more


def test_a_load_through_a_pipe_prints_a_line_per_10_percent(capsys: pytest.CaptureFixture[str]) -> None:
    events = [*_progress("loading", 64), {"phase": "active", "detail": "active"}]
    client = FakeClient("switch", events)
    client.get = lambda path, **_: {"id": 9, "kind": "switch", "outcome": "active", "error": None}  # type: ignore[method-assign]
    assert remote.follow(client, 9, as_json=False) == 0  # type: ignore[arg-type]
    bars = [line for line in capsys.readouterr().out.splitlines() if "loading [" in line]
    assert len(bars) == 11, bars
