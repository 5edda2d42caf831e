"""What an experiment stores as it goes (the experiments table's `steps` column: JSON of Record): each
step (a profile in a round) with its switch and benchmarks, the rounds' orders, the verdicts, the restore."""

from __future__ import annotations

from dataclasses import dataclass, field

from daemon.core.run_types import Outcome


@dataclass
class Step:
    """One profile of an experiment: its switch, its benchmarks and how each ended."""

    profile: str
    round: int = 0  # of an experiment in rounds (0: the first, or the only one)
    switch_run_id: int | None = None
    benchmark_run_ids: list[int] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None

    @property
    def measured(self) -> bool:
        return Outcome.OK in self.outcomes


@dataclass
class Restore:
    profile: str
    switch_run_id: int | None = None
    ok: bool = False
    error: str | None = None


@dataclass
class Record:
    """What an experiment stores as it goes (the `steps` column: JSON of this dataclass)."""

    steps: list[Step] = field(default_factory=list)
    orders: list[list[str]] = field(default_factory=list)  # each round's order of the profiles
    verdicts: list[str] = field(default_factory=list)  # each profile against the first, and a drift
    restore: Restore | None = None
    error: str | None = None

    def summary(self) -> tuple[str, str | None]:
        """The final event's detail and the run's error."""
        failed = [f"{s.profile}: {s.error}" for s in self.steps if s.error]
        measured = list(dict.fromkeys(s.profile for s in self.steps if s.measured))
        r = self.restore
        detail = f"measured {', '.join(measured) or 'nothing'}" + (
            f" in {len(self.orders)} rounds" if len(self.orders) > 1 else ""
        )
        detail += "".join(f"; {v}" for v in self.verdicts)
        detail += f"; restored {r.profile}" if r and r.ok else ""
        restore_error = [f"restore: {r.error}"] if r and r.error else []
        return detail, "; ".join([*failed, *restore_error]) or self.error
