"""Serving profiles: what one is (its TOML keys, validated), the set a folder holds and the problems of an
invalid file. Reading the folder: core/profile_files.py."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from daemon.core.errors import NotFound

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# A systemd service name: no path separators, optional template instance, `.service` suffix.
UNIT_RE = re.compile(r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$")

EngineName = Literal["vllm", "sglang", "custom"]
ENGINE_UNIT_PREFIX = "k25-engine@"  # the template unit k25-ctl installs: it runs `k25-ctl launch INSTANCE`


def engine_unit(instance: str) -> str:
    """The instance of k25-ctl's engine unit template (a profile's name, or a sweep's BASE.vN)."""
    return f"{ENGINE_UNIT_PREFIX}{instance}.service"


def variant_unit(base: str, n: int) -> str:
    """The unit of a sweep's n-th variant of `base`: never a profile's, as a profile's name has no dot."""
    return engine_unit(f"{base}.v{n}")


VARIANT_UNITS = engine_unit("*.v*")  # every sweep's variant units, as a systemd unit pattern


class Policy(enum.StrEnum):
    """What the serving watch does when the engine crashes (`on_failure`) or hangs (`on_hang`)."""

    RESTART = "restart"
    ROLLBACK = "rollback"
    NONE = "none"


class WarmMode(enum.StrEnum):
    OFF = "off"
    ON_SWITCH = "on-switch"
    ALWAYS = "always"


class ParkMode(enum.StrEnum):
    """How an engine gives its GPU memory back while its process stays (parking)."""

    SLEEP = "sleep"  # vLLM's sleep mode (/sleep, /wake_up, /is_sleeping)
    RELEASE = "release"  # SGLang's memory saver (/release_memory_occupation, /resume_memory_occupation)


class SpeculativeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    method: Literal["eagle3", "eagle", "ngram", "mtp"] = "eagle3"
    draft_model: str = Field(min_length=1)
    # vLLM's num_speculative_tokens; SGLang's speculative-num-steps.
    num_speculative_tokens: int = Field(default=3, ge=1, le=16)
    draft_tensor_parallel_size: int | None = Field(default=None, ge=1)
    # SGLang only.
    eagle_topk: int = Field(default=1, ge=1)
    num_draft_tokens: int | None = Field(default=None, ge=2)

    @property
    def draft_tokens_per_step(self) -> int:
        """Tokens verified per step, bonus token included (SGLang's num-draft-tokens)."""
        return self.num_draft_tokens or self.num_speculative_tokens + 1


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    description: str = ""
    engine: EngineName
    unit: str = ""  # default: k25-engine@<name>.service
    adopt: bool = False  # an operator-written unit: only start and stop it
    model: str = Field(min_length=1)
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    tensor_parallel_size: int = Field(default=8, ge=1)
    gpus: list[int] = Field(default_factory=lambda: list(range(8)))
    memory_fraction: float | None = Field(default=None, gt=0, le=1)
    trust_remote_code: bool = True
    extra_args: list[str] = Field(default_factory=list)
    environment: dict[str, str] = Field(default_factory=dict)
    speculative: SpeculativeConfig | None = None
    # LoRA adapters the engine serves beside the base model (name -> path): rendered as the engine's flags,
    # and each gets a known-answer request of its own (a wake that loses one is caught).
    lora_adapters: dict[str, str] = Field(default_factory=dict)
    command: list[str] | None = None
    health_path: str | None = None
    metrics_path: str | None = None
    load_timeout_s: float = Field(default=2700.0, gt=0)
    probe_timeout_s: float = Field(default=60.0, gt=0)
    log_ignore: list[str] = Field(default_factory=list)
    # What the serving watch does when the engine exits on its own (default: restart for the default
    # profile, rollback for others) or hangs (default: only alert).
    on_failure: Policy | None = None
    on_hang: Policy = Policy.NONE
    # Page-cache warming of the weight files: on-switch (read them while the old engine stops, start the
    # engine once they are in), always (keep them resident: re-warm when residency drops), off.
    warm: WarmMode = WarmMode.OFF
    # Before this profile's engine is stopped, it drains: out of rotation, then its requests finish.
    drain: bool = True
    # Parking: switched away from, the engine sleeps instead of stopping (its process, CUDA graphs and
    # compile caches stay; weights go to host RAM at level 1); what it may still hold per GPU; and whether
    # its dev endpoints may listen on a non-loopback address.
    park: ParkMode | None = None
    # 1: weights to pinned host RAM; 2: dropped, reloaded at the wake; "auto": chosen at each park
    # (parking/levels.py) from what each way costs on this host and whether level 1 fits.
    park_level: Literal[1, 2, "auto"] = 1
    park_residual_mib: int = Field(default=6144, ge=0)
    park_expose_ok: bool = False

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("must be lowercase letters, digits, '-' or '_' (no path separators or dots)")
        return v

    @field_validator("lora_adapters")
    @classmethod
    def _adapter_names(cls, v: dict[str, str]) -> dict[str, str]:
        for name, path in v.items():
            if not NAME_RE.match(name) or not path:
                raise ValueError(
                    f"adapter {name!r}: a name of lowercase letters, digits, '-' or '_', and a path"
                )
        return v

    @field_validator("unit")
    @classmethod
    def _safe_unit(cls, v: str) -> str:
        if v and not UNIT_RE.match(v):
            raise ValueError(f"{v!r} is not a valid systemd service name (NAME.service, no '/')")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int]) -> list[int]:
        if not v or any(g < 0 for g in v) or len(set(v)) != len(v):
            raise ValueError("must be a non-empty list of distinct GPU indices >= 0")
        return v

    @field_validator("log_ignore")
    @classmethod
    def _patterns(cls, v: list[str]) -> list[str]:
        for p in v:
            try:
                re.compile(p)
            except re.error as e:
                raise ValueError(f"{p!r} is not a regular expression: {e}") from e
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not v[0]):
            raise ValueError("must be a non-empty argv list")
        return v

    @field_validator("health_path", "metrics_path")
    @classmethod
    def _http_path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError("must start with '/'")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Profile:
        if self.tensor_parallel_size > len(self.gpus):
            raise ValueError(
                f"tensor_parallel_size: {self.tensor_parallel_size} is larger than the "
                f"{len(self.gpus)} GPUs listed in gpus"
            )
        if self.engine == "custom":
            if self.command is None:
                raise ValueError("command: engine 'custom' needs an explicit command")
            if self.health_path is None:
                raise ValueError("health_path: engine 'custom' needs a health_path to probe")
        if not self.unit:
            object.__setattr__(self, "unit", engine_unit(self.name))
        return self

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host  # noqa: S104
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class ProfileProblem:
    key: str
    message: str


@dataclass(frozen=True)
class InvalidProfile:
    file: Path
    name: str
    problems: list[ProfileProblem]

    def __str__(self) -> str:
        return "; ".join(f"{self.file}: key {p.key!r}: {p.message}" for p in self.problems)


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    file: Path
    sha256: str


@dataclass
class ProfileSet:
    valid: dict[str, LoadedProfile] = field(default_factory=dict)
    invalid: list[InvalidProfile] = field(default_factory=list)

    def get(self, name: str) -> LoadedProfile | None:
        return self.valid.get(name)

    def require(self, name: str) -> LoadedProfile:
        """The valid profile `name`; NotFound says why not (an invalid one: its file's error)."""
        lp = self.valid.get(name)
        if lp is None:
            bad = next((str(p) for p in self.invalid if p.name == name), None)
            raise NotFound(f"profile {name!r} is invalid: {bad}" if bad else f"no valid profile {name!r}")
        return lp
