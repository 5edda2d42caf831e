"""The CLI's exit codes, defined once: 0 ok, 2 usage (bad input, unknown name), 3 failed or rolled back,
4 busy (another switch runs, or the host refuses)."""

from __future__ import annotations

EXIT_OK, EXIT_USAGE, EXIT_FAILED, EXIT_BUSY = 0, 2, 3, 4
