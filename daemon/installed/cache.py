"""What the engines said, kept in the state directory so that neither a reload nor a daemon restart asks
them again: each interpreter's engine version (valid while the interpreter and its package folder keep
their modification times: an upgrade rewrites the folder), and each version's flag list."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("k25.installed")


class InstalledCache:
    """Two maps of JSON objects (versions, flag lists); written whole, atomically, on each change."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.versions: dict[str, dict[str, Any]] = {}
        self.flags: dict[str, dict[str, Any]] = {}
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:  # a damaged cache is asked again, not trusted
            log.warning("engines' cache %s not read (%s): the engines will be asked again", path, e)
            return
        if isinstance(data, dict):
            self.versions = dict(data.get("versions") or {})
            self.flags = dict(data.get("flags") or {})

    def put(self, table: str, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            (self.versions if table == "versions" else self.flags)[key] = value
            self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"versions": self.versions, "flags": self.flags}))
            tmp.replace(self.path)
        except OSError as e:  # a read-only or full disk: the engines are asked again after a restart
            log.warning("engines' cache %s not written: %s", self.path, e)
