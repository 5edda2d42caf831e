"""GET /host: the host's park rates (calibrated or the documented defaults) and what each parking profile's
ways cost on it, predicted by the model (parking/costs.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class RatesOut(BaseModel):
    """GiB/s. `measured_at` null: never calibrated here (`k25-ctl host calibrate`): the defaults."""

    model_config = ConfigDict(from_attributes=True)
    pin_process: float = Field(description="one process pinning, torch's default pinned allocator")
    pin_host: float = Field(description="the host's ceiling for many processes pinning at once, default")
    pin_process_registered: float = Field(description="one process, registered pinning (k25-ctl's rendering)")
    pin_host_registered: float
    device_to_host: float = Field(description="per GPU")
    host_to_device: float = Field(description="per GPU")
    page_cache: float = Field(description="resident weight files into a GPU, per GPU")
    disk: float = Field(description="weight files from a cold disk, host-wide")
    measured_at: datetime | None


class WayOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    name: str
    park_s: float
    wake_s: float
    ram_bytes: int = Field(description="host RAM the parked engine pins")


class ParkCostsOut(BaseModel):
    profile: str
    weight_bytes: int
    resident: float = Field(description="the share of the weights in the page cache, at the last scan")
    ways: list[WayOut]


class HostOut(BaseModel):
    rates: RatesOut
    parking: list[ParkCostsOut] = Field(description="each parking profile whose weights were scanned")
