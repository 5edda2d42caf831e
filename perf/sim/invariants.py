"""What must hold after every step of the simulation, read from outside the daemon: systemd inside the
sandbox (perf/sim/inside.py), the engines' own endpoints, the database file itself, and GET /status.

Each check returns the violations it saw, as sentences. The daemon's state is kept current by events, so a
check that fails is read again for a short while (`settled_check`): a state that converges is not a
violation, one that stays wrong is."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from daemon.serving.policies import RESTARTS_IN
from daemon.store.db import revisions
from perf.sim.world import PARKS, RESTART_QUIET_S, World

STATUS_WITHIN_S = 1.0
CONVERGE_S = 5.0
SETTLE_S = 240.0
# Runs that start, stop or kill engines, or hold the host while they measure: one at a time (runs/jobs.py).
EXCLUSIVE = ("switch", "rollback", "teardown", "unpark", "benchmark", "experiment", "gpu_reset")
RECENT = 300  # the newest runs compared with each other after a step


@dataclass
class Reading:
    """One look at the host from every side."""

    status: dict[str, Any]
    status_s: float
    facts: dict[str, Any]
    runs: list[sqlite3.Row]
    proofs: dict[int, list[str]]  # run id -> its event details (the runs that brought an engine up)
    sleeping: dict[str, bool | None]  # parking profile -> its engine's /is_sleeping (None: no answer)
    integrity: str
    revision: tuple[str | None, str]


def _db(world: World) -> sqlite3.Connection:
    c = sqlite3.connect(f"file:{world.database}?mode=ro", uri=True, timeout=10)
    c.row_factory = sqlite3.Row
    return c


def settle(world: World, *, within_s: float = SETTLE_S) -> list[str]:
    """Until no job holds the host and no run but the serving one is running (the daemon may be
    restarting): [] or why it did not settle. A crashed engine's restart is coming while /status's reason
    says so; a failed host must also stay quiet for RESTART_QUIET_S (the moment between the crash and the
    policy saying so)."""
    deadline = time.monotonic() + within_s
    last, quiet_since = "never answered", None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            st = world.client.get("/status", timeout=5).json()
            restarting = RESTARTS_IN in (st.get("reason") or "")  # a crashed engine's restart is coming
            busy = st["state"] == "switching" or st.get("job_run_id") is not None or restarting
            with contextlib.closing(_db(world)) as db:
                running = db.execute(
                    "SELECT id, kind FROM runs WHERE outcome = 'running' AND kind NOT IN ('serving', 'external')"
                ).fetchall()
            if busy or running:
                quiet_since = None
            else:
                quiet_since = quiet_since or time.monotonic()
                if (
                    st["state"] not in ("failed", "unhealthy")
                    or time.monotonic() - quiet_since >= RESTART_QUIET_S
                ):
                    return []
            last = f"state {st['state']}, job {st.get('job_run_id')}, running {[tuple(r) for r in running]}"
        time.sleep(0.1)
    return [f"[settle] the host did not settle within {within_s:.0f}s: {last}"]


def read(world: World) -> Reading:
    began = time.monotonic()
    status = world.client.get("/status", timeout=10).json()
    status_s = time.monotonic() - began
    facts = world.facts()
    with contextlib.closing(_db(world)) as db:
        runs = db.execute(
            "SELECT id, kind, profile, outcome, started_at, ended_at, parent_id FROM runs ORDER BY id DESC LIMIT ?",
            (RECENT,),
        ).fetchall()
        running = db.execute("SELECT id, kind, profile, outcome, started_at, ended_at, parent_id FROM runs "
                             "WHERE outcome = 'running' AND id <= ?", (runs[-1]["id"] if runs else 0,)).fetchall()  # fmt: skip
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        proofs: dict[int, list[str]] = {}
        if status["state"] in ("active", "unhealthy") and status["active_profile"]:
            row = db.execute(
                "SELECT id FROM runs WHERE profile = ? AND kind IN ('switch', 'rollback') AND outcome = 'active' "
                "ORDER BY id DESC LIMIT 1",
                (status["active_profile"],),
            ).fetchone()
            if row is not None:
                details = db.execute(
                    "SELECT detail, at FROM run_events WHERE run_id = ? ORDER BY id", (row[0],)
                )
                proofs[row[0]] = [f"{d}\t{at}" for d, at in details.fetchall()]
    sleeping: dict[str, bool | None] = {}
    for name in PARKS:
        if facts["units"].get(world.units[name], {}).get("ActiveState") != "active":
            continue
        try:
            answer = httpx.get(f"http://127.0.0.1:{world.ports[name]}/is_sleeping", timeout=2).json()
            sleeping[name] = bool(answer["is_sleeping"])
        except (httpx.HTTPError, ValueError, KeyError):
            sleeping[name] = None
    return Reading(
        status, status_s, facts, [*runs, *running], proofs, sleeping, integrity, revisions(world.database)
    )


def _at(text: str | None) -> float | None:
    if text is None:
        return None
    t = datetime.fromisoformat(str(text))
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp()


def check(world: World, r: Reading) -> list[str]:
    out: list[str] = []
    st, units = r.status, r.facts["units"]
    active = st["active_profile"] if st["state"] in ("active", "unhealthy") else None
    parked = {p["profile"] for p in st.get("parked", [])}
    if r.status_s > STATUS_WITHIN_S:
        out.append(f"[status] GET /status took {r.status_s:.2f}s")
    # The host agrees with systemd's units.
    engine_units = {u: p for p, u in world.units.items()}
    for unit, state in units.items():
        if unit not in engine_units:
            continue
        profile, running = engine_units[unit], state["ActiveState"] in ("active", "activating", "reloading")
        if profile == active and state["ActiveState"] != "active":
            out.append(f"[units] the host serves {profile} but its unit {unit} is {state['ActiveState']}")
        if running and profile != active and profile not in parked:
            out.append(
                f"[units] {unit} is {state['ActiveState']} but the host says {st['state']} ({active}), not parked"
            )
        seen = (st.get("units", {}).get(unit) or {}).get("active_state")
        if seen is not None and seen != state["ActiveState"]:
            out.append(f"[units] the daemon sees {unit} {seen}, systemd {state['ActiveState']}")
    # No engine process of a stopped profile, no engine shm file nobody of a running unit holds.
    # An engine process in a live unit's cgroup is that unit's; one outside any (an orphan that left its
    # cgroup) is tolerated only if it started after a live engine's main process: that engine's own orphan,
    # for its next teardown. Older ones are what a stop left behind.
    live_units = {u for u, s in units.items() if s["ActiveState"] in ("active", "activating", "deactivating")}
    starts = [
        int(units[u].get("ExecMainStartTimestampMonotonic") or 0) / 1e6
        for u in live_units & set(engine_units)
    ]
    live_pids = set()
    for p in r.facts["processes"]:
        if p["unit"] in live_units or any(p["started_s"] >= t > 0 for t in starts):
            live_pids.add(p["pid"])
        else:
            out.append(f"[leftover] engine process {p['pid']} ({p['cmd'][:60]}) left in {p['unit']}")
    for name, holders in r.facts["shm"].items():
        if not set(holders) & live_pids:
            out.append(f"[leftover] /dev/shm/{name} left behind (held by {holders or 'nobody'})")
    out += _runs(r, active)
    out += _proven(r, active, units.get(world.units.get(active or "", ""), {}))
    for name in parked:
        if r.sleeping.get(name) is not True:
            out.append(
                f"[parked] {name} is listed parked but its engine says is_sleeping={r.sleeping.get(name)}"
            )
    for name, asleep in r.sleeping.items():
        if asleep and name not in parked:
            out.append(f"[parked] {name}'s engine sleeps but the host does not list it parked")
    if r.integrity != "ok":
        out.append(f"[database] integrity_check: {r.integrity}")
    if r.revision[0] != r.revision[1]:
        out.append(f"[database] the database is at {r.revision[0]}, not the head {r.revision[1]}")
    return out


def _runs(r: Reading, active: str | None) -> list[str]:
    out = []
    rows = {row["id"]: row for row in r.runs}
    for row in rows.values():
        if row["outcome"] == "running" and not (row["kind"] == "serving" and row["profile"] == active):
            out.append(f"[runs] run {row['id']} ({row['kind']} {row['profile']}) is still running")

    def ancestors(run_id: int) -> set[int]:
        seen: set[int] = set()
        while (row := rows.get(run_id)) is not None and row["parent_id"] and row["parent_id"] not in seen:
            run_id = row["parent_id"]
            seen.add(run_id)
        return seen

    held = sorted((row for row in rows.values() if row["kind"] in EXCLUSIVE and row["ended_at"]),
                  key=lambda row: row["id"])  # fmt: skip
    for i, a in enumerate(held):
        a0, a1 = _at(a["started_at"]) or 0.0, _at(a["ended_at"]) or 0.0
        for b in held[i + 1 :]:
            b0, b1 = _at(b["started_at"]) or 0.0, _at(b["ended_at"]) or 0.0
            related = a["id"] in ancestors(b["id"]) or b["id"] in ancestors(a["id"])
            same_family = ancestors(a["id"]) & ancestors(b["id"])
            if b0 < a1 and a0 < b1 and not related and not same_family:
                out.append(
                    f"[one-job] runs {a['id']} ({a['kind']}) and {b['id']} ({b['kind']}) held the host at once"
                )
    return out


def _proven(r: Reading, active: str | None, unit: dict[str, str]) -> list[str]:
    """The engine that serves answered its known answer after its last start or wake."""
    if active is None:
        return []
    if not r.proofs:
        return [f"[proof] {active} serves but no switch to it ended active"]
    ((run_id, events),) = r.proofs.items()
    # Answered: recorded after a cold start (or answered and not stored, on a full disk), or equal to the
    # recorded one after a wake. Not: "no known answer recorded" (no answer came).
    said = ("known answer recorded", "known answer equal", "known answer not stored")
    proofs = [e for e in events if any(e.startswith(w) for w in said)]
    if not proofs:
        return [f"[proof] {active} serves after run {run_id}, which proved no known answer"]
    started = unit.get("ExecMainStartTimestamp", "")
    proven_at = _at(proofs[-1].split("\t")[1]) or 0.0
    if started and float(started) > proven_at + 1.0:
        return [
            f"[proof] {active}'s engine started at {started}, after its last proof (run {run_id}, {proven_at:.0f})"
        ]
    return []


def settled_check(world: World) -> tuple[list[str], Reading]:
    """The invariants, read again for up to CONVERGE_S while any fails."""
    deadline = time.monotonic() + CONVERGE_S
    while True:
        reading = read(world)
        found = check(world, reading)
        if not found or time.monotonic() >= deadline:
            return found, reading
        time.sleep(0.25)
