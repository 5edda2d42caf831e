"""Sweeps as the experiments service runs them: the variants derived and held as profiles while the
experiment runs, its plan with a time estimate, its result, and `promote` (a variant written as a new
profile file, for the operator to review and activate: never an automatic switch)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import tomlkit

from daemon.core.errors import Busy, InvalidInput, NotFound
from daemon.core.jsontypes import StoredJson
from daemon.core.profiles import NAME_RE, LoadedProfile, ProfileSet
from daemon.core.run_types import Outcome, RunKind
from daemon.engines import engine_for
from daemon.experiments.compare import Measured, finished
from daemon.experiments.per_request import samples_of
from daemon.experiments.sweep.ranking import Metric, SweepResult, sweep_result
from daemon.experiments.sweep.variants import Scalar, Sweep, derive
from daemon.store.bench import BenchStore

log = logging.getLogger("k25.bench")


class VariantHolder(Protocol):
    def hold_variants(self, variants: list[LoadedProfile]) -> None: ...
    def release_variants(self) -> None: ...


@dataclass
class PlanStep:
    profile: str
    values: dict[str, Scalar]
    argv: list[str]
    switch_s: float | None  # the base's last good switch (its variants read the same weights)
    benchmark_s: float | None  # the base's last benchmark, times the repeats


@dataclass
class Plan:
    base: str
    steps: list[PlanStep]
    switches: int
    estimate_s: float | None
    notes: list[str] = field(default_factory=list)


class Sweeps:
    def __init__(
        self,
        *,
        bench_store: BenchStore,
        profiles: Callable[[], Awaitable[ProfileSet]],
        variants: VariantHolder,
        profiles_path: Path,
        max_variants: int,
        check_paths: bool,
        service_port: int | None,
    ) -> None:
        self.bench_store = bench_store
        self.profiles = profiles
        self.variants = variants
        self.profiles_path = profiles_path
        self.max_variants = max_variants
        self.check_paths = check_paths
        self.service_port = service_port

    def hold(self, sweep: Sweep) -> None:
        """The sweep's variants are profiles while it runs (switched to, watched, listed)."""
        self.variants.hold_variants([v.loaded for v in sweep.variants])

    def release(self) -> None:
        self.variants.release_variants()

    async def derive(self, lp: LoadedProfile, vary: dict[str, list[Scalar]]) -> Sweep:
        if "~" in lp.profile.name:
            raise InvalidInput(f"{lp.profile.name} is a variant: sweep its base, or promote it first")
        text = await asyncio.to_thread(lp.file.read_text)
        return derive(lp, text, vary, max_variants=self.max_variants, check_paths=self.check_paths)

    @staticmethod
    def request_fields(sweep: Sweep) -> StoredJson:
        """What the experiment's stored request keeps of its sweep (the result and promote read it)."""
        axes = [
            {"key": a.key, "label": a.label, "values": list(a.values), "base": a.base} for a in sweep.axes
        ]
        return {
            "axes": axes,
            "variants": [
                {
                    "name": v.name,
                    "values": v.values,
                    "argv": v.argv,
                    "unit": v.loaded.profile.unit,
                    "toml": v.toml,
                }
                for v in sweep.variants
            ],
            "sweep_notes": sweep.notes,
        }

    async def plan(self, sweep: Sweep, *, repeats: int, active: str | None, back: str | None) -> Plan:
        base = sweep.base.profile.name
        typical = self.bench_store.typical_seconds
        switch_s = await asyncio.to_thread(typical, profile=base, kind=RunKind.SWITCH, outcome=Outcome.ACTIVE)
        bench_s = await asyncio.to_thread(typical, profile=base, kind=RunKind.BENCHMARK, outcome=Outcome.OK)
        each = None if bench_s is None else bench_s * repeats
        p = sweep.base.profile
        steps = [PlanStep(base, {}, engine_for(p).argv(p), None if active == base else switch_s, each)]
        steps += [PlanStep(v.name, v.values, v.argv, switch_s, each) for v in sweep.variants]
        switches = sum(1 for s in steps if s.profile != active) + (1 if back else 0)
        notes = list(sweep.notes)
        notes.append(
            f"every variant restarts the engine ({switches} switches): the engines read these "
            "settings only at start, none of them can be changed on a running server"
        )
        if active == base:
            notes.append(f"{base} is active: measured in place, no switch")
        if switch_s is None:
            notes.append(f"{base} has no recorded switch: load time unknown")
        if bench_s is None:
            notes.append(f"{base} has no recorded benchmark: benchmark time unknown")
        parts = [s.switch_s for s in steps if s.profile != active] + [s.benchmark_s for s in steps]
        if back:
            back_s = await asyncio.to_thread(
                typical, profile=back, kind=RunKind.SWITCH, outcome=Outcome.ACTIVE
            )
            parts.append(back_s)
        known = [p for p in parts if p is not None]
        estimate = sum(known) if known and len(known) == len(parts) else None
        if estimate is None and known:
            notes.append(f"at least {sum(known):.0f} s from what is recorded; the rest is unknown")
        return Plan(base, steps, switches, estimate, notes)

    async def result(self, run_id: int, request: StoredJson, metric: Metric) -> SweepResult:
        views = await asyncio.to_thread(self.bench_store.recent, limit=500, experiment=run_id)
        return await asyncio.to_thread(self._result, run_id, request, finished(reversed(views)), metric)

    def _result(
        self, run_id: int, request: StoredJson, measured: list[Measured], metric: Metric
    ) -> SweepResult:
        """Blocking (the requests read and judged): in a worker thread."""
        found = self.bench_store.first_requests([m.run_id for m in measured])
        samples = {rid: samples_of(rows) for rid, rows in found.items()}
        return sweep_result(run_id, request, measured, metric, samples=samples)

    async def promote(self, run_id: int, request: StoredJson, variant: str, name: str | None) -> Path:
        """The variant as a new profile file (a new name: never over an existing file), validated as the
        daemon will read it; the folder is read again so it is listed at once."""
        found = next((v for v in request.get("variants") or [] if v["name"] == variant), None)
        if found is None:
            names = ", ".join(str(v["name"]) for v in request.get("variants") or []) or "none"
            raise NotFound(f"experiment {run_id} has no variant {variant!r} (its variants: {names})")
        base = str((request.get("profiles") or ["?"])[0])
        name = name or _default_name(base, dict(found["values"]))
        if not NAME_RE.match(name):
            raise InvalidInput(f"profile name {name!r}: lowercase letters, digits, '-' or '_', up to 63")
        profiles = await self.profiles()
        doc = tomlkit.parse(str(found["toml"]))
        if self.service_port is None:  # every profile on a port of its own (the loader refuses a clash)
            used = {lp.profile.port for lp in profiles.valid.values()}
            port = int(doc.get("port", 8000))
            while port in used:
                port += 1
            doc["port"] = port
        when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        head = (
            f"# Promoted by k25-ctl from experiment {run_id}, variant {variant} ({when}).\n"
            f"# Review it, then: k25-ctl activate {name}\n"
        )
        path = self.profiles_path / f"{name}.toml"
        await asyncio.to_thread(_write_new, path, head + tomlkit.dumps(doc))
        fresh = await self.profiles()  # the folder read again: listed at once, or refused below
        bad = next((p for p in fresh.invalid if p.file == path), None)
        if bad is not None or name not in fresh.valid:
            await asyncio.to_thread(path.unlink)
            await self.profiles()
            raise InvalidInput(f"the promoted profile would be invalid, not written: {bad or name}")
        log.info("experiment run %d: variant %s promoted to profile %s (%s)", run_id, variant, name, path)
        return path


def _default_name(base: str, values: dict[str, Scalar]) -> str:
    slug = "-".join(f"{k}{str(v).lower()}" for k, v in values.items())
    return re.sub(r"[^a-z0-9_-]+", "-", f"{base}-{slug}".lower()).strip("-")[:63]


def _write_new(path: Path, text: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise Busy(f"{path} exists: never overwritten (choose another name with --name)") from None
    except OSError as e:
        raise InvalidInput(f"cannot write {path}: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(text)
