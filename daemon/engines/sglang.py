"""SGLang: argv, readiness, metrics and log knowledge (docs/engines.md, the SGLang sections)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import PurePath
from types import MappingProxyType
from typing import TYPE_CHECKING

from daemon.core.jsontypes import ForeignJson, RequestBody
from daemon.core.profiles import ParkMode
from daemon.engines.base import COMMON_SHM_PATTERNS, Engine
from daemon.engines.engine_types import MetricsSnapshot, ParkCalls, ParkStep, Readiness, StageRule, UsageDelta
from daemon.engines.metric_text import delta, mean, metric_samples, ratio, total

if TYPE_CHECKING:
    from daemon.core.profiles import Profile

SPEC_ALGORITHMS = {"eagle3": "EAGLE3", "eagle": "EAGLE"}
GENERATE_PATH = "/generate"  # SGLang's native generation route

M_PROMPT = "sglang:prompt_tokens_total"
M_GENERATION = "sglang:generation_tokens_total"
M_REQUESTS = "sglang:num_requests_total"
M_ACCEPT_LENGTH = "sglang:spec_accept_length"
M_ACCEPT_RATE = "sglang:spec_accept_rate"
M_TTFT = "sglang:time_to_first_token_seconds"
M_ITL = "sglang:inter_token_latency_seconds"
M_E2E = "sglang:e2e_request_latency_seconds"
M_THROUGHPUT = "sglang:gen_throughput"
M_RUNNING = "sglang:num_running_reqs"
M_WAITING = "sglang:num_queue_reqs"
M_KV_USAGE = "sglang:token_usage"
SERVER_INFO_PATH = "/server_info"
# The counters and gauges k25-ctl reads (histograms are left to Prometheus).
SCRAPED = (
    M_PROMPT,
    M_GENERATION,
    M_REQUESTS,
    M_ACCEPT_LENGTH,
    M_ACCEPT_RATE,
    M_RUNNING,
    M_WAITING,
    M_KV_USAGE,
)

# What the engine prints and how its processes are named (the sandbox's fake engine speaks the same).
TITLE_SCHEDULER = "sglang::scheduler_TP{rank}"
TITLE_DETOKENIZER = "sglang::detokenizer"
LINE_LOAD_BEGIN = "Load weight begin. avail mem={mem:.2f} GB"
LINE_LOAD_END = "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem={mem:.2f} GB"
LINE_READY = "The server is fired up and ready to roll!"
SHM_NAME = "sgl_shm_{token}"


# The memory saver (SGLang's server args and HTTP API): release and resume the GPU memory it occupies.
FLAG_MEMORY_SAVER = "--enable-memory-saver"
# The memory saver RELEASES the weights: only with a CPU backup does the resume bring them back (else it
# serves uninitialised memory: sgl-project/sglang#6367, #19442; the flag came with PR #10873).
FLAG_WEIGHTS_CPU_BACKUP = "--enable-weights-cpu-backup"
PATH_RELEASE = "/release_memory_occupation"
PATH_RESUME = "/resume_memory_occupation"
# LoRA adapters: --enable-lora --lora-paths name=path ... (docs: LoRA serving).
FLAG_ENABLE_LORA = "--enable-lora"
FLAG_LORA_PATHS = "--lora-paths"
# POST: drops the radix cache (python/sglang/srt/entrypoints/http_server.py).
PATH_FLUSH_CACHE = "/flush_cache"
# The engine as installed (docs/engines.md, "Engines as installed"): its package, and its server's entry:
# `python -m sglang.launch_server` (or the launch_server.py script, or `sglang serve` of the newer CLI),
# whose plain argparse `--help` lists every flag.
DISTRIBUTIONS = ("sglang",)
ENTRY_MODULE = "launch_server"
ENTRY_CLI = ("sglang", "serve")
HELP = ("--help",)


class SglangEngine(Engine):
    name = "sglang"
    label = "SGLang"
    distributions = DISTRIBUTIONS
    help_args = HELP
    # The native /generate answers with meta_info.completion_tokens and spec_verify_ct (the verify steps
    # of the request); the OpenAI routes do not pass them on (entrypoints/openai/serving_completions.py).
    verify_source = "per request: meta_info.spec_verify_ct of SGLang's native /generate"
    park_mode = ParkMode.RELEASE
    tunable_flags = MappingProxyType(
        {
            "--max-running-requests": int,
            "--chunked-prefill-size": int,
            "--cuda-graph-max-bs": int,
            "--max-prefill-tokens": int,
            "--disable-cuda-graph": bool,
            "--enable-torch-compile": bool,
            "--schedule-policy": str,
            "--schedule-conservativeness": float,
            "--attention-backend": str,
        }
    )
    flag_keys = MappingProxyType(
        {
            "--mem-fraction-static": "memory_fraction",
            "--tp-size": "tensor_parallel_size",
            "--speculative-num-steps": "speculative.num_speculative_tokens",
            "--speculative-eagle-topk": "speculative.eagle_topk",
            "--speculative-num-draft-tokens": "speculative.num_draft_tokens",
        }
    )
    park_flag_reasons = MappingProxyType(
        {
            FLAG_MEMORY_SAVER: "without it SGLang has no release/resume of its memory",
            FLAG_WEIGHTS_CPU_BACKUP: (
                "without it the memory saver releases the weights instead of offloading them, and after the "
                "resume the server answers from uninitialised memory with /health 200 "
                "(sgl-project/sglang#6367, #19442; the flag came with PR #10873)"
            ),
        }
    )
    process_titles = ("sglang::*",)
    front_end_titles = ("*sglang.launch_server*",)
    shm_patterns = (*COMMON_SHM_PATTERNS, "sem.loky-*", "sgl_shm_*", "multi_tokenizer_args_*")
    ready_res = (re.compile(re.escape(LINE_READY)),)
    milestone_res = (
        re.compile(r"Load weight begin\."),
        re.compile(r"Load weight end\."),
        re.compile(r"Capture cuda graph begin"),
        re.compile(r"Uvicorn running on "),
    )

    # torch.compile (SGLang's docs: TORCHINDUCTOR_CACHE_DIR), Triton kernels, FlashInfer's JIT workspace.
    cache_env = (
        ("TORCHINDUCTOR_CACHE_DIR", "torchinductor"),
        ("TRITON_CACHE_DIR", "triton"),
        ("FLASHINFER_WORKSPACE_BASE", "flashinfer"),
    )
    # SGLang marks its weight loading with begin/end lines (timed by the journal) and times its graphs.
    stage_rules = (
        StageRule("weights", re.compile(r"Load weight begin\."), mark="begin"),
        StageRule("weights", re.compile(r"Load weight end\."), mark="end"),
        StageRule("graphs", re.compile(r"Capture cuda graph end\. Time elapsed: (?P<secs>[\d.]+) s")),
    )

    def entry_end(self, words: Sequence[str]) -> int | None:
        for i, w in enumerate(words):
            name = PurePath(w).name.removesuffix(".py").rsplit(".", 1)[-1]
            if name == ENTRY_MODULE:
                return i + 1
            if w == ENTRY_CLI[1] and i > 0 and PurePath(words[i - 1]).name == ENTRY_CLI[0]:
                return i + 1
        return None

    def render(self, profile: Profile) -> list[str]:
        argv = [
            "python3",
            "-m",
            "sglang.launch_server",
            "--model-path",
            profile.model,
            "--tp-size",
            str(profile.tensor_parallel_size),
        ]
        if profile.trust_remote_code:
            argv.append("--trust-remote-code")
        # Metrics are off by default in SGLang; k25-ctl needs them.
        argv += ["--host", profile.host, "--port", str(profile.port), "--enable-metrics"]
        if profile.served_model_name:
            argv += ["--served-model-name", profile.served_model_name]
        if profile.memory_fraction is not None:
            argv += ["--mem-fraction-static", str(profile.memory_fraction)]
        if (spec := profile.speculative) is not None:
            argv += [
                "--speculative-algorithm",
                SPEC_ALGORITHMS[spec.method],
                "--speculative-draft-model-path",
                spec.draft_model,
                "--speculative-num-steps",
                str(spec.num_speculative_tokens),
                "--speculative-eagle-topk",
                str(spec.eagle_topk),
                "--speculative-num-draft-tokens",
                str(spec.draft_tokens_per_step),
            ]
        if profile.lora_adapters:
            argv += [
                FLAG_ENABLE_LORA,
                FLAG_LORA_PATHS,
                *(f"{n}={p}" for n, p in profile.lora_adapters.items()),
            ]
        return argv + list(self.park_flags(profile)) + profile.extra_args

    def adapter_fields(self, adapter: str) -> dict[str, object]:
        """SGLang names the adapter in the request's `lora_path` (its OpenAI server takes it too)."""
        return {"lora_path": adapter}

    def park_calls(self, profile: Profile) -> ParkCalls | None:
        if profile.park is None:
            return None
        return ParkCalls(PATH_RELEASE, (ParkStep(PATH_RESUME),), reset_prefix_cache=PATH_FLUSH_CACHE)

    def check(self, profile: Profile) -> list[tuple[str, str]]:
        problems = self.park_problems(profile)
        if profile.park_level != 1:
            problems.append(("park_level", "SGLang releases its memory one way: park_level applies to vLLM"))
        spec = profile.speculative
        if spec is not None and spec.method not in SPEC_ALGORITHMS:
            problems.append(
                ("speculative.method", f"SGLang supports {sorted(SPEC_ALGORITHMS)}, not {spec.method!r}")
            )
        return problems

    def readiness(self, status: int | None) -> Readiness:
        # Recent builds answer 503 from /health until the warm-up generation succeeded.
        if status is None:
            return Readiness.LOADING
        return Readiness.HEALTHY if status == 200 else Readiness.WARMING

    def parse_metrics(self, text: str) -> MetricsSnapshot:
        s = metric_samples(text, SCRAPED)
        return MetricsSnapshot(
            prompt_tokens=total(s, M_PROMPT),
            generation_tokens=total(s, M_GENERATION),
            requests=total(s, M_REQUESTS),
            # Gauges are per TP rank: the mean, not the sum.
            spec_accept_length_gauge=mean(s, M_ACCEPT_LENGTH),
            spec_accept_rate_gauge=mean(s, M_ACCEPT_RATE),
            running=total(s, M_RUNNING),
            waiting=total(s, M_WAITING),
            kv_usage=mean(s, M_KV_USAGE),
        )

    def scrape_paths(self, profile: Profile) -> tuple[str, ...]:
        # /server_info's lifetime mean accept length, diffed between scrapes, gives acceptance.
        return (*super().scrape_paths(profile), SERVER_INFO_PATH)

    def snapshot(self, profile: Profile, bodies: dict[str, str]) -> MetricsSnapshot:
        snap = super().snapshot(profile, bodies)
        try:
            info = json.loads(bodies[SERVER_INFO_PATH]) if SERVER_INFO_PATH in bodies else {}
        except ValueError:
            info = {}
        length = self.server_accept_length(info) if isinstance(info, dict) else None
        return replace(snap, server_accept_length=length)

    @staticmethod
    def server_accept_length(server_info: ForeignJson) -> float | None:
        """Lifetime mean accept length from /server_info (`internal_states[i].avg_spec_accept_length`)."""
        states = server_info.get("internal_states") or []
        values = [
            float(st["avg_spec_accept_length"])
            for st in states
            if isinstance(st, dict) and st.get("avg_spec_accept_length") is not None
        ]
        return sum(values) / len(values) if values else None

    def version_path(self) -> str | None:
        return SERVER_INFO_PATH  # `version` is one of /server_info's keys

    def verify_request(
        self, profile: Profile, prompt: str, *, max_tokens: int, temperature: float, ignore_eos: bool
    ) -> tuple[str, RequestBody] | None:
        params = {"max_new_tokens": max_tokens, "temperature": temperature, "ignore_eos": ignore_eos}
        return GENERATE_PATH, {"text": prompt, "sampling_params": params}

    def verify_counts(self, answer: ForeignJson) -> tuple[int, int] | None:
        meta = answer.get("meta_info")
        if not isinstance(meta, dict):
            return None
        tokens, steps = meta.get("completion_tokens"), meta.get("spec_verify_ct")
        if not isinstance(tokens, int) or not isinstance(steps, int) or steps <= 0:
            return None
        return tokens, steps

    def usage_delta(self, profile: Profile, before: MetricsSnapshot, after: MetricsSnapshot) -> UsageDelta:
        base = super().usage_delta(profile, before, after)
        length = _interval_accept_length(before, after)
        if length is None:
            length = after.spec_accept_length_gauge
        spec = profile.speculative
        if length is None or spec is None:
            return base
        per_step = spec.draft_tokens_per_step
        return UsageDelta(
            prompt_tokens=base.prompt_tokens,
            generation_tokens=base.generation_tokens,
            acceptance_length=length,
            # SGLang's own rate counts the bonus token; the normalised one is vLLM's definition.
            acceptance_rate=length / per_step,
            normalized_rate=(length - 1.0) / (per_step - 1) if per_step > 1 else None,
        )


def _interval_accept_length(before: MetricsSnapshot, after: MetricsSnapshot) -> float | None:
    """The lifetime mean L = tokens / verify steps; steps = tokens / L on each side, so the interval's
    mean is Δtokens / Δsteps."""
    g1, g2 = before.generation_tokens, after.generation_tokens
    l1, l2 = before.server_accept_length, after.server_accept_length
    if g1 is None or g2 is None or l2 is None or l2 <= 0:
        return None
    steps_before = g1 / l1 if l1 and l1 > 0 else 0.0
    return ratio(delta(g2, g1), g2 / l2 - steps_before)


ENGINE = SglangEngine()
