"""Web tests: the status page in Debian's headless Chromium (Playwright), against the sandbox."""

from __future__ import annotations
