"""The realengine tier: a real vLLM (the CPU build, a tiny local model) in its own sandbox. Its cache (venv
and model) is prepared by scripts/realengine.sh, outside the repository; tests here fail (never skip) when
it is missing, since CI prepares it."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.sandboxing import Api

CACHE = Path(os.environ.get("K25_REALENGINE_DIR", "/var/cache/k25-ctl/realengine"))
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}


def engine_env(kv_gib: int = 1) -> dict[str, str]:
    """What every real vLLM here runs with: offline, and its caches beside the cached venv. TorchInductor's
    too: a sandbox's own engine cache starts empty, and the CPU build then compiles the same six C++
    kernels again at its first start (g++, ~15 s of CPU a run)."""
    return {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_gib), "VLLM_CACHE_ROOT": str(CACHE / "vllm-cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(CACHE / "torchinductor")}  # fmt: skip


# A host's own wrapper of vLLM's CLI that adds one flag to its server's parser: the flag list k25-ctl checks
# comes from the engine as the profile runs it, not from what k25-ctl knows of vLLM.
SITE_FLAG = "--k25-site-flag"
WRAPPER = f"""import runpy
import sys

from vllm.utils.argparse_utils import FlexibleArgumentParser

_format_help = FlexibleArgumentParser.format_help


def format_help(self):
    if self.prog.endswith("serve") and "{SITE_FLAG}" not in self._option_string_actions:
        self.add_argument("{SITE_FLAG}", help="added by this host's wrapper")
    return _format_help(self)


if __name__ == "__main__":
    FlexibleArgumentParser.format_help = format_help
    sys.argv[0] = "{CACHE / "vllm_launcher.py"}"
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def real_profile(
    name: str,
    *,
    port: int,
    model: str,
    extra: tuple[str, ...] = (),
    kv_gib: int = 1,
    launcher: Path = CACHE / "vllm_launcher.py",
    park: str | None = None,
) -> str:
    """An ordinary profile whose command is the real server (vLLM's CLI from the cached venv). -O0: no
    torch.compile, which this CPU build redoes at every start (its AOT cache fails to load: "'function'
    object has no attribute 'finalize_loading'"): a cold start takes ~32 s instead of ~60 s, and the tier
    tests k25-ctl's control of the engine, not vLLM's compiler."""
    command = [str(CACHE / "venv/bin/python"), str(launcher), "serve", model, "--host",
               "127.0.0.1", "--port", str(port), "--served-model-name", "tiny", "--max-model-len", "1024",
               "--max-num-seqs", "8", "-O0", *extra]  # fmt: skip
    env = engine_env(kv_gib)
    lines = [
        f'description = "{name}: a real vLLM (CPU build, tiny model)"',
        'engine = "vllm"',
        f'model = "{model}"',
        'served_model_name = "tiny"',
        f"port = {port}",
        "tensor_parallel_size = 1",
        "gpus = [0]",
        "load_timeout_s = 400",
        "probe_timeout_s = 120",
        *([f'park = "{park}"'] if park else []),
        f"command = {json.dumps(command)}",
        "",
        "[environment]",
        *(f'{k} = "{v}"' for k, v in env.items()),
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(
    scope="module"
)  # down when its module ends: its real vLLM holds 2.6 GB and wakes now and then
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sbx.SandboxInfo, Api]]:
    if not (CACHE / "recipe").exists():
        pytest.fail(f"no realengine cache in {CACHE}: run scripts/realengine.sh (the test command does)")
    if os.geteuid() != 0:
        pytest.fail("the realengine tier needs root: it boots systemd in namespaces")
    extra = tmp_path_factory.mktemp("real-profiles")
    model = str(CACHE / "model")
    files = {
        "real-vllm": real_profile("real-vllm", port=free_port(), model=model),
        "real-vllm-ngram": real_profile(
            "real-vllm-ngram", port=free_port(), model=model,
            extra=("--speculative-config", json.dumps(NGRAM, separators=(",", ":"))),
        ),
        "real-missing-model": real_profile("real-missing-model", port=free_port(), model="/srv/models/not-there"),
        # More KV cache than the machine has: fails late, in the worker, after EngineCore and its shm exist.
        "real-kv-too-big": real_profile("real-kv-too-big", port=free_port(), model=model, kv_gib=500),
    }  # fmt: skip
    models = tmp_path_factory.mktemp("models")
    make_models(models)
    wrapper = models / "site_vllm.py"
    wrapper.write_text(WRAPPER)
    # Checked against the installed vLLM's own parser at every reload (none of these is ever started).
    files |= {
        "real-typo": real_profile("real-typo", port=free_port(), model=model, extra=("--speculative-num-step", "2")),
        "real-sleep-cpu": real_profile("real-sleep-cpu", port=free_port(), model=model,
                                       extra=("--enable-sleep-mode",), park="sleep"),
        "real-site-flag": real_profile("real-site-flag", port=free_port(), model=model, extra=(SITE_FLAG,),
                                       launcher=wrapper),
        "real-site-flag-unwrapped": real_profile("real-site-flag-unwrapped", port=free_port(), model=model,
                                                 extra=(SITE_FLAG,)),
    }  # fmt: skip
    for name, text in files.items():
        (extra / f"{name}.toml").write_text(text)
    # A fake profile whose port a hand-started real vLLM will take.
    (extra / "port-target.toml").write_text(fake_engine_profile("port-target", flavor="vllm", port=free_port(),
                                                                 models=models, load_seconds=1.0))  # fmt: skip
    # The engine, not the daemon, finds the missing model path (a network mount may not be mounted yet).
    info = sbx.up(profiles=extra, load_seconds=1.0, settings={"check_model_paths": "false"}, binds=(models,))
    yield info, Api(info)
    sbx.down(info)
    assert sbx.leftovers(info) == []
