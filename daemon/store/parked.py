"""The parked engines, one row each, so that a daemon restart readopts them as parked (not as active)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlmodel import select

from daemon.core.hoststate import ParkedInfo
from daemon.store.models import ParkedEngine
from daemon.store.queries import Store


class ParkedStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def save(self, info: ParkedInfo, profile_sha256: str) -> None:
        row = ParkedEngine(
            profile=info.profile,
            unit=info.unit,
            main_pid=info.main_pid,
            since=datetime.fromtimestamp(info.since, UTC),
            level=info.level,
            gpu_mib=json.dumps({str(k): v for k, v in info.gpu_mib.items()}),
            host_ram_bytes=info.host_ram_bytes,
            run_id=info.run_id,
            profile_sha256=profile_sha256,
        )
        with self.store.session() as s:
            s.merge(row)
            s.commit()

    def remove(self, profile: str) -> None:
        with self.store.session() as s:
            row = s.get(ParkedEngine, profile)
            if row is not None:
                s.delete(row)
                s.commit()

    def all(self) -> list[tuple[ParkedInfo, str]]:
        """Every parked engine recorded, with the hash of the profile file it runs."""
        with self.store.session() as s:
            rows = s.exec(select(ParkedEngine)).all()
        return [(_info(r), r.profile_sha256) for r in rows]


def _info(r: ParkedEngine) -> ParkedInfo:
    since = r.since if r.since.tzinfo else r.since.replace(tzinfo=UTC)  # SQLite keeps no zone: it is UTC
    return ParkedInfo(
        profile=r.profile,
        unit=r.unit,
        since=since.timestamp(),
        level=r.level,
        main_pid=r.main_pid,
        gpu_mib={int(k): int(v) for k, v in json.loads(r.gpu_mib).items()},
        host_ram_bytes=r.host_ram_bytes,
        run_id=r.run_id,
    )
