"""One controller per capability, each what one route module calls: requests become service calls and
answers become schemas. `Controllers` is what the app's routes find on `app.state`."""

from __future__ import annotations

from dataclasses import dataclass

from daemon.api.controllers.bench import BenchController
from daemon.api.controllers.capture import CaptureController, DatasetsController
from daemon.api.controllers.gpus import GpusController
from daemon.api.controllers.profiles import ProfilesController
from daemon.api.controllers.runs import RunsController
from daemon.api.controllers.status import StatusController
from daemon.api.controllers.teardown import TeardownController


@dataclass(frozen=True)
class Controllers:
    status: StatusController
    profiles: ProfilesController
    runs: RunsController
    teardown: TeardownController
    bench: BenchController
    capture: CaptureController
    datasets: DatasetsController
    gpus: GpusController
