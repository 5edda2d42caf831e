"""Response and request models of the capture and dataset routes: counts, never captured text (the export
is JSON lines, behind the admin token)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from daemon.datasets.service import NAME


class CaptureAckOut(BaseModel):
    kept: bool  # false: not in the sampled share (or the writer was too far behind)


class CaptureCountsOut(BaseModel):
    received: int
    sampled_out: int
    kept: int
    rejected: int
    too_large: int
    dropped_pending: int
    dropped_caps: int
    write_errors: int


class CaptureOut(BaseModel):
    """The capture's state and counts (open to anonymous reads: no captured text)."""

    enabled: bool
    token_configured: bool
    sample_rate: float
    max_rows: int
    max_bytes: int
    retention_days: float
    rows: int
    bytes: int
    oldest: datetime | None
    newest: datetime | None
    categories: dict[str, int]
    pending: int
    since_start: CaptureCountsOut


class PurgedOut(BaseModel):
    deleted: int


class FromCaptureIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME)
    since: datetime | None = None
    until: datetime | None = None
    categories: list[str] = Field(default_factory=list, max_length=64)

    def only(self) -> list[str]:
        return [c.lower() for c in self.categories]


class DatasetDeletedOut(BaseModel):
    name: str
    prompts: int
