"""Known answers (daemon.engines.answers): one row per profile, file, argv and engine version, replaced by
each cold start that ends active. Read back by the wake check (the exact key) and by the views (each
profile's current key)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlmodel import select
from sqlmodel.sql.expression import SelectOfScalar

from daemon.core.jsontypes import StoredJson
from daemon.store.models import KnownAnswer
from daemon.store.queries import Store


def argv_sha256(argv: list[str]) -> str:
    return hashlib.sha256(json.dumps(argv, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class AnswerKey:
    profile: str
    profile_sha256: str
    argv_sha256: str
    engine_version: str = ""  # the engine as installed ("": not known)


@dataclass(frozen=True)
class KnownAnswerRow:
    key: AnswerKey
    run_id: int
    recorded_at: datetime
    answers: list[StoredJson]


class KnownAnswerStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    def save(
        self, key: AnswerKey, run_id: int, answers: list[StoredJson]
    ) -> tuple[KnownAnswerRow, KnownAnswerRow | None]:
        """Replace the record of `key`: the new one, and the one it replaced (None: the first)."""
        with self.store.session() as s:
            old = s.exec(_where(key)).first()
            before = _row(old) if old is not None else None
            if old is not None:
                s.delete(old)
                s.flush()
            row = KnownAnswer(
                profile=key.profile,
                profile_sha256=key.profile_sha256,
                argv_sha256=key.argv_sha256,
                engine_version=key.engine_version,
                run_id=run_id,
                answers=json.dumps(answers),
            )
            s.add(row)
            s.commit()
            s.refresh(row)
            return _row(row), before

    def get(self, key: AnswerKey) -> KnownAnswerRow | None:
        with self.store.session() as s:
            row = s.exec(_where(key)).first()
        return _row(row) if row is not None else None

    def other_version(self, key: AnswerKey) -> KnownAnswerRow | None:
        """The newest record of the same profile, file and argv under another engine version."""
        with self.store.session() as s:
            row = s.exec(
                select(KnownAnswer)
                .where(
                    KnownAnswer.profile == key.profile,
                    KnownAnswer.profile_sha256 == key.profile_sha256,
                    KnownAnswer.argv_sha256 == key.argv_sha256,
                    KnownAnswer.engine_version != key.engine_version,
                )
                .order_by(KnownAnswer.id.desc())  # type: ignore[union-attr]
            ).first()
        return _row(row) if row is not None else None

    def all(self) -> list[KnownAnswerRow]:
        with self.store.session() as s:
            rows = s.exec(select(KnownAnswer)).all()
        return [_row(r) for r in rows]


def _where(key: AnswerKey) -> SelectOfScalar[KnownAnswer]:
    return select(KnownAnswer).where(
        KnownAnswer.profile == key.profile,
        KnownAnswer.profile_sha256 == key.profile_sha256,
        KnownAnswer.argv_sha256 == key.argv_sha256,
        KnownAnswer.engine_version == key.engine_version,
    )


def _row(r: KnownAnswer) -> KnownAnswerRow:
    at = r.recorded_at if r.recorded_at.tzinfo else r.recorded_at.replace(tzinfo=UTC)  # SQLite keeps UTC
    return KnownAnswerRow(
        AnswerKey(r.profile, r.profile_sha256, r.argv_sha256, r.engine_version),
        r.run_id,
        at,
        list(json.loads(r.answers)),
    )
