"""What a teardown did, process by process, and what the GPUs read after it (stored with the run)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from daemon.core.jsontypes import StoredJson
from daemon.teardown.plan import Spared


@dataclass
class ProcessOutcome:
    pid: int
    title: str
    reasons: list[str]
    foreign: bool
    gpu_mib: int | None
    signals: list[str] = field(default_factory=list)
    outcome: str = ""  # exited after SIGTERM | killed by SIGKILL | survived SIGKILL | gone before the signal
    state: str = ""
    wchan: str = ""
    orphan: bool = False
    grace_s: float = 0.0  # how long SIGTERM was given before SIGKILL
    gpus: list[int] = field(default_factory=list)  # the GPUs it held (a D-state holder's need a reset)


@dataclass
class GpuCheck:
    index: int
    used_mib: int
    limit_mib: int
    pids: list[int]
    clean: bool = field(init=False)  # no compute process, memory back to the idle baseline

    def __post_init__(self) -> None:
        self.clean = not self.pids and self.used_mib <= self.limit_mib


@dataclass
class VerifyResult:
    ok: bool
    gpus: list[GpuCheck]
    samples: int
    seconds: float
    message: str


@dataclass
class TeardownReport:
    processes: list[ProcessOutcome] = field(default_factory=list)
    spared: list[Spared] = field(default_factory=list)
    shm_removed: list[str] = field(default_factory=list)
    shm_kept: list[dict[str, str]] = field(default_factory=list)
    steps: dict[str, float] = field(default_factory=dict)
    needs_reset: list[ProcessOutcome] = field(default_factory=list)
    verify: VerifyResult | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.needs_reset and (self.verify is None or self.verify.ok)

    def to_dict(self) -> StoredJson:  # stored with the run as JSON
        return asdict(self) | {"ok": self.ok}
