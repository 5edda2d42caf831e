"""The daemon's logging, written for journald: one line per event. When stdout is the journal (systemd sets
JOURNAL_STREAM) each line carries its priority as an sd-daemon `<N>` prefix and no timestamp of its own
(journald stamps it); on a terminal, plain timestamped lines."""

from __future__ import annotations

import logging
import os
import sys

# logging level -> syslog priority (sd-daemon(3)): journald parses the `<N>` prefix of stdout lines.
PRIORITIES = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


class JournalFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        priority = PRIORITIES.get(record.levelno, 6)
        text = super().format(record).replace("\n", " | ")  # tracebacks stay one entry in the journal
        return f"<{priority}>{text}"


def to_journal() -> bool:
    """stdout/stderr connected to journald (systemd sets JOURNAL_STREAM to its device:inode)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    if not stream:
        return False
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return stream == f"{st.st_dev}:{st.st_ino}"


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if to_journal():
        handler.setFormatter(JournalFormatter("%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per engine probe request is noise
