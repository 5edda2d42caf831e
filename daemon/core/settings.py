"""Daemon settings: `/etc/k25-ctl/k25-ctl.toml` (or the file named by K25_CONFIG), overridden by
`K25_*` environment variables. Every path is a setting so that the sandbox and tests can point it
elsewhere."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_CONFIG_FILE = Path("/etc/k25-ctl/k25-ctl.toml")

# Processes that are never signalled, whatever they hold (GPU monitors and management daemons).
DEFAULT_PROTECTED_NAMES = (
    "nvidia-persistenced",
    "nv-hostengine",
    "dcgm-exporter",
    "nvidia-smi",
    "nvidia-fabricmanager",
    "nv-fabricmanager",
    "systemd",
    "dbus-daemon",
    "sshd",
)


def config_file() -> Path:
    return Path(os.environ.get("K25_CONFIG", str(DEFAULT_CONFIG_FILE)))


def installed() -> bool:
    """Settings were named (K25_CONFIG) or install.sh wrote them: this host's k25-ctl is the one to use."""
    return "K25_CONFIG" in os.environ or DEFAULT_CONFIG_FILE.exists()


class CaptureSettings(BaseModel):
    """The capture sink (`[capture]` in k25-ctl.toml; K25_CAPTURE__ENABLED=1 ...): copies of production
    requests, mirrored by the balancer, kept to replay as a dataset. Off by default."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    token_file: Path | None = None  # default: <config_dir>/capture-token (write-only: it reads nothing)
    sample_rate: float = Field(default=1.0, gt=0, le=1)  # the share of mirrored requests kept
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)  # a larger request is not kept
    max_rows: int = Field(default=100_000, ge=1)  # then the oldest are dropped
    max_bytes: int = Field(default=256 * 1024**2, ge=1024)  # of kept request bodies; then the oldest go
    retention_days: float = Field(default=7.0, gt=0)
    category_header: str = "X-K25-Category"  # set by the balancer (e.g. from the route): the category
    max_pending: int = Field(default=20_000, ge=1)  # kept in memory before the next write; then dropped


RESET_COMMAND = ("systemd-run", "--wait", "--pipe", "--collect", "--quiet", "nvidia-smi", "--gpu-reset")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="K25_", extra="forbid", env_ignore_empty=True, env_nested_delimiter="__"
    )

    config_dir: Path = Path("/etc/k25-ctl")
    profiles_dir: Path | None = None  # default: <config_dir>/profiles.d
    token_file: Path | None = None  # default: <config_dir>/token
    state_dir: Path = Path("/var/lib/k25-ctl")
    db_path: Path | None = None  # default: <state_dir>/k25.db
    shm_dir: Path = Path("/dev/shm")  # noqa: S108 - the real shared-memory mount, not a temp file
    gpu_device_glob: str = "/dev/nvidia*"
    journal_command: list[str] = Field(default_factory=lambda: ["journalctl"])
    gpu_backend: Literal["nvml", "simulated", "none"] = "nvml"
    # How long an engine may take to print its flags (`vllm serve --help=all` imports all of vLLM: ~10-40 s
    # of CPU); asked once per installed version (daemon/installed/).
    engine_help_timeout_s: float = Field(default=180.0, gt=0)
    engines_cache: Path | None = None  # what the engines said (daemon/installed/); default in state_dir
    # Simulated GPUs (sandbox): how many, and their total memory in MiB.
    sim_gpu_count: int = Field(default=8, ge=0, le=64)
    sim_gpu_total_mib: int = Field(default=143_771, gt=0)

    bind_host: str = "127.0.0.1"
    port: int = Field(default=8025, ge=1, le=65535)
    unix_socket: Path | None = None
    reads_require_token: bool = False
    max_body_bytes: int = Field(default=64 * 1024, gt=0)
    # POST /benchmarks and /experiments may carry the operator's own prompts.
    max_prompts_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    # Host names the API answers to besides loopback (a DNS-rebinding page gets 400).
    allowed_hosts: list[str] = Field(default_factory=list)
    max_sse_streams: int = Field(default=64, ge=1)  # open /events and /runs/N/events streams
    # Diagnosis only: every event-loop step that holds the loop this long is logged, named (slow_steps.py).
    slow_callback_ms: float | None = Field(default=None, gt=0)
    gpu_sample_s: float = Field(default=10.0, gt=0)  # the shared GPU sampler that reads are served from
    strays_sample_s: float = Field(default=60.0, gt=0)
    # GPU health (daemon/health/): counters read this often (the driver's events come as they happen); a
    # crash this soon after an Xid on one of the engine's GPUs is attributed to it.
    gpu_health_every_s: float = Field(default=1.0, gt=0)
    xid_attribution_s: float = Field(default=60.0, gt=0)
    # `k25-ctl gpus reset`: the command, given the GPUs as `{gpus}` (comma-separated indices) or `-i N,M`
    # where it resets some; "board" resets every GPU (an NVSwitch system such as HGX H100/H200 resets them
    # together). Through systemd-run: a transient unit has the root capabilities the daemon's unit drops.
    gpu_reset_command: list[str] = Field(default_factory=lambda: list(RESET_COMMAND))
    gpu_reset_scope: Literal["board", "gpu"] = "board"
    gpu_reset_timeout_s: float = Field(default=300.0, gt=0)
    # The serving watch resets a GPU itself after an Xid whose action is RESET_GPU (off: an operator does).
    gpu_reset_automatic: bool = False
    # `k25-ctl doctor`: the GPUs this host should have, and the least /dev/shm the engines' workers need.
    expected_gpus: int = Field(default=8, ge=0)
    shm_min_bytes: int = Field(default=1 << 30, ge=0)
    runs_retention_days: float = Field(default=365.0, gt=0)  # older finished runs are deleted
    # The daily online backup (k25-ctl-backup.timer runs `k25-ctl db backup --scheduled`): the newest
    # `backups_keep` are kept in `backup_dir` (default: <state_dir>/backups).
    backup_dir: Path | None = None
    backups_keep: int = Field(default=7, ge=1)

    default_profile: str = "baseline"
    check_model_paths: bool = True
    foreign_gpu_policy: Literal["kill", "refuse"] = "kill"
    protected_names: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_NAMES))
    term_grace_s: float = Field(default=30.0, gt=0)
    kill_grace_s: float = Field(default=10.0, gt=0)
    # An orphaned engine process (parent gone) gets SIGKILL this soon: orphaned EngineCores ignore SIGTERM.
    orphan_grace_s: float = Field(default=3.0, gt=0)
    verify_timeout_s: float = Field(default=60.0, gt=0)
    verify_samples: int = Field(default=3, ge=1)
    idle_memory_slack_mib: int = Field(default=1024, ge=0)
    stop_timeout_s: float = Field(default=180.0, gt=0)
    # Drain before a stop: /ready turns 503, the balancer gets `drain_grace_s` to see it, then the
    # engine's running and waiting requests are awaited (its gauges, read every `drain_poll_s`) up to
    # `drain_timeout_s`.
    drain_grace_s: float = Field(default=5.0, ge=0)
    drain_timeout_s: float = Field(default=120.0, ge=0)
    drain_poll_s: float = Field(default=0.5, gt=0)
    # Every profile's engine on this one port (a balancer's fixed backend address); unset: each its own.
    service_port: int | None = Field(default=None, ge=1, le=65535)

    # The serving watch: liveness and metrics of the active engine (off: only for measuring its cost).
    watch_enabled: bool = True
    watch_interval_s: float = Field(default=10.0, gt=0)
    health_timeout_s: float = Field(default=3.0, gt=0)
    health_failures: int = Field(default=3, ge=1)  # in a row: unhealthy
    stall_s: float = Field(default=120.0, gt=0)  # requests running, no token generated: unhealthy
    restart_limit_per_hour: int = Field(default=2, ge=0)
    # While the runs database cannot be written (disk full), held records are tried again this often.
    store_retry_s: float = Field(default=5.0, gt=0)
    restart_backoff_s: float = Field(default=5.0, ge=0)  # doubled for each restart within the hour
    metrics_row_s: float = Field(default=60.0, gt=0)  # one stored row per this many seconds of serving
    metrics_minute_retention_h: float = Field(default=48.0, gt=0)  # then compacted to hourly rows
    metrics_hour_retention_d: float = Field(default=90.0, gt=0)  # then deleted
    # Engines' compile caches (vLLM's torch.compile cache, Triton, Inductor, FlashInfer): persistent, so a
    # second start of a profile reuses them instead of compiling again.
    engine_cache_dir: Path = Path("/var/cache/k25-ctl/engines")
    # Page-cache warming: never past MemAvailable minus this reserve; parallel readers; read size.
    warm_reserve_bytes: int = Field(default=8 * 1024**3, ge=0)
    warm_workers: int = Field(default=4, ge=1, le=64)
    warm_block_bytes: int = Field(default=16 * 1024**2, ge=4096)
    residency_every_s: float = Field(default=60.0, gt=0)  # each profile's weight residency, refreshed
    warm_always_below: float = Field(default=0.98, gt=0, le=1)  # warm = "always": re-warm under this share
    # Parking: a level-1 sleep pins the weights in host RAM. As many engines sleep at once as their weights
    # fit in park_ram_budget_bytes (unset: MemAvailable at the daemon's start minus the reserve); a park
    # beyond it stops the least recently parked first. Each park also needs its weights in MemAvailable
    # minus the reserve at the time. max_parked: a cap on the count as well (unset: none; 0: parking off).
    park_ram_reserve_bytes: int = Field(default=64 * 1024**3, ge=0)
    park_ram_budget_bytes: int | None = Field(default=None, ge=0)
    max_parked: int | None = Field(default=None, ge=0)
    # Where the engines run in a memory-limited cgroup (a container, a slice with MemoryMax): its folder
    # under /sys/fs/cgroup, and MemAvailable for parking and warming is what that limit leaves.
    memory_cgroup: Path | None = None
    # The threads that register a vLLM level-1 park's pinned backup (torch's pinned_num_register_threads: a
    # power of 2, at most 128). 8 measured 8.1 GiB/s in one process on an H200 host, against 1.8 by default.
    park_pin_threads: int = Field(default=8, ge=1, le=128)
    # Named latency SLOs for benchmarks (`--slo interactive`):
    # interactive = "ttft_p95_ms=800,tpot_p95_ms=60,errors=0.5%".
    slos: dict[str, str] = Field(default_factory=dict)
    # A sweep's variants (the product of its axes' values) at most.
    max_variants: int = Field(default=12, ge=1, le=100)

    capture: CaptureSettings = Field(default_factory=CaptureSettings)

    @field_validator("park_pin_threads")
    @classmethod
    def _power_of_two(cls, n: int) -> int:
        if n & (n - 1):
            raise ValueError(f"torch takes a power of 2 for pinned_num_register_threads, not {n}")
        return n

    # Derived paths follow config_dir/state_dir unless set on their own.
    @property
    def profiles_path(self) -> Path:
        return self.profiles_dir or self.config_dir / "profiles.d"

    @property
    def token_path(self) -> Path:
        return self.token_file or self.config_dir / "token"

    @property
    def capture_token_path(self) -> Path:
        return self.capture.token_file or self.config_dir / "capture-token"

    @property
    def database_path(self) -> Path:
        return self.db_path or self.state_dir / "k25.db"

    @property
    def backups_path(self) -> Path:
        return self.backup_dir or self.state_dir / "backups"

    @property
    def installed_cache_path(self) -> Path:
        """What the engines said of their versions and flags (daemon/installed/cache.py)."""
        return self.engines_cache or self.state_dir / "engines-installed.json"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file is looked up when settings are built, never at import time.
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file()))


def load_settings() -> Settings:
    return Settings()
