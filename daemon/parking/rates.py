"""The host's park rates as stored: the last `k25-ctl host calibrate` (a JSON file in the state directory,
with when it was measured and with which interpreter), or the documented defaults where it never ran."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from daemon.host.calibration import RATE_KEYS
from daemon.parking.costs import DEFAULT_RATES, HostRates

FILE = "host-rates.json"


def load(state_dir: Path) -> HostRates:
    """The measured rates, or the defaults (also for a file that cannot be read: said by measured_at None)."""
    try:
        data = json.loads((state_dir / FILE).read_text())
        at = datetime.fromisoformat(str(data["measured_at"]))
        ranges = data.get("ranges") or {}
        spread = {k: (float(ranges[k][0]), float(ranges[k][1])) for k in RATE_KEYS if k in ranges}
        return HostRates.of({k: float(data[k]) for k in RATE_KEYS}, at, spread)
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_RATES


def save(
    state_dir: Path,
    measured: Mapping[str, float],
    *,
    python: str,
    ranges: Mapping[str, tuple[float, float]] | None = None,
    now: datetime | None = None,
) -> HostRates:
    at = now or datetime.now(UTC)
    rates = HostRates.of(measured, at, ranges)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / FILE).write_text(json.dumps(rates.as_json() | {"python": python}, indent=1) + "\n")
    return rates
