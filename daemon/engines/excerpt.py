"""A failed engine's journal, cut so that the root cause survives: its matched error lines first, then as
much of the tail as fits."""

from __future__ import annotations

from daemon.core.errors import K25Error
from daemon.core.profiles import Profile
from daemon.engines import engine_for
from daemon.engines.engine_types import LogKind
from daemon.host.journal import JournalPort

EXCERPT_LINES = 30


def failure_excerpt(errors: list[str], tail: list[str], limit: int = EXCERPT_LINES) -> str:
    """The matched error lines first (the root cause must survive), then as much of the tail as fits."""
    kept = errors[-limit:]
    room = limit - len(kept)
    rest = [line for line in tail if line not in kept]
    return "\n".join([*kept, *(rest[-room:] if room > 0 else [])])


async def journal_excerpt(journal: JournalPort, profile: Profile, errors: list[str]) -> str:
    """A failed engine's journal: its error lines first (those seen live, and those in the tail that the
    live follower had not read yet when the unit died), then the tail."""
    try:
        tail = [r.message for r in await journal.tail(profile.unit, EXCERPT_LINES)]
    except (OSError, K25Error):
        tail = []
    engine = engine_for(profile)
    late = [t for t in tail if (ev := engine.classify_line(t)) is not None and ev.kind is LogKind.ERROR]
    return failure_excerpt([*errors, *(t for t in late if t not in errors)], tail)
