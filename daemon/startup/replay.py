"""The capture sink and the datasets, built for the daemon: the capture token is read once (a missing or
readable-by-others one refuses every mirrored request, and /status says so)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from daemon.api.auth import load_token
from daemon.api.controllers.capture import CaptureController, DatasetsController
from daemon.capture.sink import CaptureSink
from daemon.core.errors import K25Error
from daemon.core.settings import Settings
from daemon.datasets.service import Datasets
from daemon.store.capture import CaptureStore
from daemon.store.datasets import DatasetStore
from daemon.store.queries import Store
from daemon.store.serving import ServingStore

log = logging.getLogger("k25.daemon")


@dataclass(frozen=True)
class Replay:
    capture: CaptureController
    datasets: DatasetsController


def build_replay(settings: Settings, store: Store, serving_store: ServingStore) -> Replay:
    token = None
    if settings.capture.enabled:
        try:
            token = load_token(settings.capture_token_path)
        except K25Error as e:
            log.error("capture: %s", e)
    captured = CaptureStore(store)
    sink = CaptureSink(settings=settings.capture, token=token, store=captured)
    datasets = Datasets(
        store=DatasetStore(store),
        captured=captured,
        generated=lambda since, until: serving_store.generated(since=since, until=until),
    )
    return Replay(CaptureController(sink=sink, store=captured), DatasetsController(datasets=datasets))
