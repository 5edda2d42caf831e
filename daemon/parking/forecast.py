"""Each park and wake predicted from the host's rates (parking/costs.py), so that every park and wake run
records what the model expected beside what it measured. A process that has pinned its backup once keeps
it (torch's caching host allocator, vllm#16663): its later parks are the copy alone."""

from __future__ import annotations

from collections.abc import Callable

from daemon.core.profiles import Profile
from daemon.engines import engine_for
from daemon.parking import costs

Weights = Callable[[Profile], tuple[int, float]]  # (weight bytes, the share resident in the page cache)


class ParkForecast:
    def __init__(self, *, rates: Callable[[], costs.HostRates], weights: Weights) -> None:
        self.rates = rates  # read at each forecast: `k25-ctl host calibrate` may have measured anew
        self.weights = weights  # blocking (a residency scan): called through asyncio.to_thread
        self._pinned: set[int] = set()  # main PIDs whose processes pinned a backup already

    def way(self, p: Profile, main_pid: int) -> costs.Way:
        """The way this park of `p` (its engine's main PID) goes, with its seconds. Blocking (a scan)."""
        return self.way_with(p, main_pid, self.weights(p))

    def way_with(self, p: Profile, main_pid: int, weights: tuple[int, float]) -> costs.Way:
        """The same from weights already scanned: (bytes, the share resident)."""
        size, resident = weights
        shape = costs.Shape.of(p, size)
        rates, engine = self.rates(), engine_for(p)
        if not engine.park_pins_weights(p):
            return costs.spread(lambda r: costs.level2(shape, r, resident=resident), rates)
        if main_pid in self._pinned:
            return costs.spread(lambda r: costs.level1_again(shape, r), rates)
        registered = engine.park_pins_registered(p)
        return costs.spread(lambda r: costs.level1_first(shape, r, registered=registered), rates)

    def table(self, p: Profile, weights: tuple[int, float]) -> list[costs.Way]:
        """Every way `p` can park, predicted from the current rates (GET /host, the page)."""
        size, resident = weights
        return costs.ways(costs.Shape.of(p, size), self.rates(), resident=resident)

    def parked(self, main_pid: int) -> None:
        """This process pinned its backup: its next park reuses the block."""
        self._pinned.add(main_pid)

    def gone(self, main_pid: int) -> None:
        """This process ended: a new one pins afresh."""
        self._pinned.discard(main_pid)


def outside(seconds: float, way: costs.Way, wake: bool) -> bool:
    """A park or wake that took longer or shorter than the calibrated rates' range implies."""
    low, high = way.range_of(wake)
    return low != high and not low <= seconds <= high


def said(seconds: float, way: costs.Way, wake: bool) -> str:
    predicted = way.wake_s if wake else way.park_s
    low, high = way.range_of(wake)
    spread = f" [{low:.1f}, {high:.1f}]" if low != high else ""
    text = f"in {seconds:.1f}s (predicted {predicted:.1f}s{spread}: {way.name})"
    if outside(seconds, way, wake):
        text += (
            "; outside the range the calibrated rates imply: the host's rates moved (k25-ctl host calibrate)"
        )
    return text
