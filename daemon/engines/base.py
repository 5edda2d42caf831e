"""The one small interface every engine module implements, and the types it speaks in."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from daemon.core.jsontypes import ForeignJson, RequestBody
from daemon.core.profiles import ParkMode
from daemon.engines.engine_types import (
    LogEvent,
    LogKind,
    MetricsSnapshot,
    ParkCalls,
    Readiness,
    StageRule,
    UsageDelta,
)
from daemon.engines.flag_list import plain_name
from daemon.engines.metric_text import delta
from daemon.engines.shell_words import carries, command_words

PIN_THREADS = 8  # torch's pinned_num_register_threads for a park's backup (8: 8.1 GiB/s on an H200 host)

# The safetensors loader's tqdm bar, printed by both engines' rank 0:
# `{desc}: {percentage:3.0f}% Completed | {n}/{total} [...]`, with or without a `(Worker pid=..)` prefix.
LOAD_PROGRESS_LINE = (
    "Loading safetensors checkpoint shards: {pct:3.0f}% Completed | {n}/{total} [{elapsed}<{left}, {rate}]"
)
LOAD_PROGRESS_RE = re.compile(r"Loading safetensors checkpoint shards:\s*(\d{1,3})% Completed \| (\d+)/(\d+)")

# Error lines every Python engine prints the same way; engines add their own.
COMMON_ERROR_RES = (
    re.compile(r"\bERROR\b"),
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(
        r"\b(SyntaxError|AttributeError|RuntimeError|ImportError|ModuleNotFoundError|AssertionError)\b"
    ),
    re.compile(r"CUDA out of memory|OutOfMemoryError"),
    re.compile(r"NCCL error|ncclInternalError|ncclSystemError"),
    re.compile(r"Bus error|Segmentation fault|core dumped"),
)

if TYPE_CHECKING:
    from daemon.core.profiles import Profile
    from daemon.engines.as_installed import Installed

# Shared-memory names left by Python SharedMemory, NCCL, PyTorch and multiprocessing semaphores.
COMMON_SHM_PATTERNS = ("psm_*", "nccl-*", "torch_*", "sem.mp-*")


LOOPBACK = ("127.0.0.1", "::1", "localhost")


class Engine(ABC):
    """What k25-ctl knows about one engine. Stateless; one instance per engine."""

    name: str
    default_health_path: str | None = "/health"
    default_metrics_path: str | None = "/metrics"
    process_titles: tuple[str, ...] = ()  # fnmatch patterns of the engine's process titles
    front_end_titles: tuple[str, ...] = ()  # its API server's title: may hold the port after a crash
    shm_patterns: tuple[str, ...] = COMMON_SHM_PATTERNS
    ready_res: tuple[re.Pattern[str], ...] = ()
    milestone_res: tuple[re.Pattern[str], ...] = ()
    error_res: tuple[re.Pattern[str], ...] = COMMON_ERROR_RES
    noise_res: tuple[re.Pattern[str], ...] = ()  # known harmless lines that match an error pattern
    stage_rules: tuple[StageRule, ...] = ()  # where a load's time goes, as the engine prints it
    cache_env: tuple[tuple[str, str], ...] = ()  # (variable, folder under the cache root) of its caches
    park_mode: ParkMode | None = None  # how it parks, if it can
    # A sweep's axes beyond the profile keys: the engine flags it may add to extra_args (flag -> value type;
    # a bool flag is present for true, left out for false), and the flags a profile key renders (the axis is
    # that key).
    tunable_flags: Mapping[str, type] = MappingProxyType({})
    flag_keys: Mapping[str, str] = MappingProxyType({})
    # The share of each GPU it takes where the profile says none (vLLM's --gpu-memory-utilization default);
    # None: it sizes itself from what is free when it starts.
    default_memory_fraction: float | None = None
    # Whether it serves the OpenAI requests of the known answer (daemon.engines.answers), and what a
    # known-answer request adds to make its answer exact (daemon.engines.answers).
    known_answer: bool = True
    answer_extras: Mapping[str, object] = MappingProxyType({})
    # The flags a parkable profile needs (rendered; a `command` must carry them), and why: the refusal of
    # a `command` that lacks one says so.
    park_flag_reasons: Mapping[str, str] = MappingProxyType({})
    # The engine as installed (daemon/installed/): the Python packages that carry it (their metadata says
    # its version without importing it), and what makes its entry print every flag its parser accepts.
    label: str = ""
    distributions: tuple[str, ...] = ()
    help_args: tuple[str, ...] = ()

    def entry_end(self, words: Sequence[str]) -> int | None:
        """Where the engine's own arguments begin among a command's words (after `vllm serve`, `python -m
        sglang.launch_server`); None: the command does not show the engine's entry."""
        return None

    def flag_name(self, word: str) -> str | None:
        """A flag word as the engine's parser reads it (None: not one it checks)."""
        return plain_name(word)

    def installed_facts(
        self, profile: Profile, installed: Installed
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """What the profile relies on that this copy of the engine lacks: (problems as (key, message),
        warnings)."""
        return [], []

    def memory_fraction(self, profile: Profile) -> float | None:
        return profile.memory_fraction or self.default_memory_fraction

    def park_pins_weights(self, profile: Profile) -> bool:
        """Whether parking copies the weights to (pinned) host RAM: level 1 does; vLLM's level 2 drops
        them."""
        return profile.park is not None and profile.park_level == 1

    def park_pins_registered(self, profile: Profile) -> bool:
        """Whether the engine's park pins by registered pages (the rendered torch allocator settings)."""
        return False

    def park_calls(self, profile: Profile) -> ParkCalls | None:
        """The HTTP calls that park and wake it (None: it cannot park)."""
        return None

    def adapter_fields(self, adapter: str) -> dict[str, object]:
        """What an OpenAI request adds to be served by a LoRA adapter: vLLM serves each as a model."""
        return {"model": adapter}

    def park_flags(self, profile: Profile) -> tuple[str, ...]:
        """The engine flags a parkable profile needs (rendered; a `command` must carry them itself)."""
        return tuple(self.park_flag_reasons) if profile.park is not None else ()

    def park_problems(self, profile: Profile) -> list[tuple[str, str]]:
        """Why the profile's `park` settings cannot work with this engine (key, message)."""
        if profile.park is None:
            return []
        if profile.park is not self.park_mode:
            can = f"park = {self.park_mode.value!r}" if self.park_mode else "no parking"
            return [("park", f"engine {self.name!r} supports {can}, not {profile.park.value!r}")]
        if profile.host not in LOOPBACK and not profile.park_expose_ok:
            why = (
                f"a parkable engine opens its sleep/wake endpoints on {profile.host}, to the network: "
                "bind it to 127.0.0.1, or say park_expose_ok = true"
            )
            return [("park_expose_ok", why)]
        if profile.command is None:
            return []  # rendered: the flags are in the argv
        words, shell = command_words(profile.command)
        missing = [flag for flag in self.park_flags(profile) if not carries(words, flag)]
        return [("command", self._lacks(profile, flag, shell)) for flag in missing]

    def _lacks(self, profile: Profile, flag: str, shell: bool) -> str:
        why = self.park_flag_reasons.get(flag, "the engine needs it to park")
        mode = profile.park.value if profile.park else ""
        where = "its argv and its shell's -c string" if shell else "its argv"
        return f"it parks (park = {mode!r}) but its command lacks {flag} (searched {where} for it): {why}"

    def argv(self, profile: Profile) -> list[str]:
        """The command line the unit execs: the profile's `command` (with `{port}` replaced by the port it
        serves on: its own, or service_port), or the rendered one."""
        if profile.command is not None:
            return [a.replace("{port}", str(profile.port)) for a in profile.command]
        return self.render(profile)

    @abstractmethod
    def render(self, profile: Profile) -> list[str]: ...

    def environment(
        self, profile: Profile, cache_root: Path | None = None, *, pin_threads: int = PIN_THREADS
    ) -> dict[str, str]:
        """The engine's environment: its GPUs, its compile caches under `cache_root` (persistent: the next
        start reuses them), then the profile's own variables (which win). `pin_threads`: the threads that
        register a parking engine's pinned backup (settings' park_pin_threads)."""
        env = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in profile.gpus)}
        if cache_root is not None:
            env |= {var: str(cache_root / sub) for var, sub in self.cache_env}
        env.update(profile.environment)
        return env

    def check(self, profile: Profile) -> list[tuple[str, str]]:
        """Engine-specific validation: (key, message) for each problem."""
        return []

    def health_path(self, profile: Profile) -> str | None:
        return profile.health_path or self.default_health_path

    def metrics_path(self, profile: Profile) -> str | None:
        return profile.metrics_path or self.default_metrics_path

    def readiness(self, status: int | None) -> Readiness:
        """Map a health answer (None: connection refused) to a readiness state."""
        if status is None:
            return Readiness.LOADING
        if status == 200:
            return Readiness.HEALTHY
        return Readiness.WARMING

    def probe_request(self, profile: Profile) -> tuple[str, RequestBody]:
        """One small streamed completion: ready means it finishes in time."""
        body = {
            "model": profile.served_model_name or profile.model,
            "prompt": "Say hello.",
            "max_tokens": 4,
            "temperature": 0,
            "stream": True,
        }
        return "/v1/completions", body

    def bench_request(
        self,
        profile: Profile,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float,
        ignore_eos: bool,
        chat: bool,
    ) -> tuple[str, RequestBody]:
        """One benchmark request: streamed, usage on every chunk (tokens per chunk) and at the end."""
        body = self._streamed(profile, max_tokens, ignore_eos) | {"temperature": temperature}
        if chat:
            return "/v1/chat/completions", body | {"messages": [{"role": "user", "content": prompt}]}
        return "/v1/completions", body | {"prompt": prompt}

    def replay_request(
        self, profile: Profile, path: str, request: RequestBody, *, max_tokens: int, ignore_eos: bool
    ) -> tuple[str, RequestBody]:
        """A dataset's request sent again: its prompt or messages and its own sampling parameters (what it
        did not set stays the engine's default, as in production), streamed as a benchmark request is, to
        the profile's model, `max_tokens` long."""
        params = {k: v for k, v in (request.get("params") or {}).items() if k != "max_completion_tokens"}
        body = self._streamed(profile, max_tokens, ignore_eos) | params | {"max_tokens": max_tokens}
        key = "messages" if "messages" in request else "prompt"
        return path, body | {key: request[key]}

    def _streamed(self, profile: Profile, max_tokens: int, ignore_eos: bool) -> RequestBody:
        body: RequestBody = {
            "model": profile.served_model_name or profile.model,
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if ignore_eos:
            body["ignore_eos"] = True  # both engines' extension: generate exactly max_tokens
        return body

    def verify_request(
        self, profile: Profile, prompt: str, *, max_tokens: int, temperature: float, ignore_eos: bool
    ) -> tuple[str, RequestBody] | None:
        """A request whose answer says how many verify steps it took (per-request acceptance); None: the
        engine says acceptance only in its counters."""
        return None

    def verify_counts(self, answer: ForeignJson) -> tuple[int, int] | None:
        """(output tokens, verify steps) of such a request's answer; None where it does not say."""
        return None

    # Where per-request verify counts come from, in the operator's words (None: nowhere).
    verify_source: str | None = None

    def version_path(self) -> str | None:
        """Where the engine says its version (None: it does not)."""
        return "/version"

    def parse_version(self, body: str) -> str | None:
        try:
            data = json.loads(body)
        except ValueError:
            return None
        version = data.get("version") if isinstance(data, dict) else None
        return str(version) if version is not None else None

    def classify_line(self, line: str, ignore: Iterable[re.Pattern[str]] = ()) -> LogEvent | None:
        if m := LOAD_PROGRESS_RE.search(line):
            return LogEvent(LogKind.PROGRESS, line, int(m[1]), int(m[2]), int(m[3]))
        if any(r.search(line) for r in self.ready_res):
            return LogEvent(LogKind.READY, line)
        if any(r.search(line) for r in self.error_res):
            if any(r.search(line) for r in (*self.noise_res, *ignore)):
                return None
            return LogEvent(LogKind.ERROR, line)
        if any(r.search(line) for r in self.milestone_res):
            return LogEvent(LogKind.MILESTONE, line)
        return None

    def parse_metrics(self, text: str) -> MetricsSnapshot:
        return MetricsSnapshot()

    def scrape_paths(self, profile: Profile) -> tuple[str, ...]:
        """What the serving watch reads each interval (the metrics endpoint, and engine extras)."""
        path = self.metrics_path(profile)
        return (path,) if path else ()

    def snapshot(self, profile: Profile, bodies: dict[str, str]) -> MetricsSnapshot:
        """The counters from the bodies of `scrape_paths` (a path that did not answer is missing)."""
        path = self.metrics_path(profile)
        return self.parse_metrics(bodies[path]) if path and path in bodies else MetricsSnapshot()

    def usage_delta(self, profile: Profile, before: MetricsSnapshot, after: MetricsSnapshot) -> UsageDelta:
        return UsageDelta(
            prompt_tokens=delta(after.prompt_tokens, before.prompt_tokens) or 0.0,
            generation_tokens=delta(after.generation_tokens, before.generation_tokens) or 0.0,
        )


def ignore_patterns(profile: Profile) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in profile.log_ignore]
