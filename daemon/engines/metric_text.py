"""Reading an engine's Prometheus text: samples by name, totals over labels, means over ranks, and the
differences and ratios of two scrapes (None where a side is missing)."""

from __future__ import annotations


def metric_samples(text: str, wanted: tuple[str, ...] = ()) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parse a Prometheus text scrape (prometheus_client's parser) into sample name -> [(labels, value)].
    With `wanted`, only those metrics' lines are parsed: the watch scrapes every interval, and an engine's
    histograms are most of its text."""
    from prometheus_client.parser import text_string_to_metric_families  # only the metrics path needs it

    if wanted:
        text = "\n".join(line for line in text.splitlines() if line.startswith(wanted)) + "\n"
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    rows = samples.get(name)
    return None if rows is None else sum(v for _, v in rows)


def mean(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    """A per-rank gauge (KV usage, accept length): the mean over ranks, not the sum."""
    rows = samples.get(name)
    return sum(v for _, v in rows) / len(rows) if rows else None


def delta(after: float | None, before: float | None) -> float | None:
    if after is None or before is None:
        return None
    return after - before


def ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den
