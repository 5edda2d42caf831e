"""Golden argv tests: the stock profiles render exactly the command lines of docs/engines.md."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from daemon.core.profile_files import load_profiles
from daemon.core.profiles import LoadedProfile, Profile
from daemon.engines import engine_for
from daemon.engines.answers import requests_for

MODEL = "/srv/models/Kimi-K2.5-INT4"
DRAFTER = "/srv/models/Kimi-K2.5-EAGLE3"


def _stock(stock_profiles: Path) -> dict[str, LoadedProfile]:
    result = load_profiles(stock_profiles)
    assert result.invalid == []
    return result.valid


def _argv(p: Profile) -> str:
    return shlex.join(engine_for(p).argv(p))


def test_stock_profiles_are_the_three_of_the_deployment(stock_profiles: Path) -> None:
    valid = _stock(stock_profiles)
    assert sorted(valid) == ["baseline", "sglang-eagle3", "vllm-eagle3"]
    assert valid["baseline"].profile.unit == "vllm-kimi-k25-int4.service"
    assert valid["vllm-eagle3"].profile.unit == "k25-engine@vllm-eagle3.service"


def test_baseline_argv(stock_profiles: Path) -> None:
    p = _stock(stock_profiles)["baseline"].profile
    assert _argv(p) == (
        f"vllm serve {MODEL} --tensor-parallel-size 8 --trust-remote-code "
        "--host 127.0.0.1 --port 8000 --served-model-name kimi-k2.5"
    )


def test_vllm_eagle3_argv(stock_profiles: Path) -> None:
    p = _stock(stock_profiles)["vllm-eagle3"].profile
    spec = '{"method":"eagle3","model":"' + DRAFTER + '","num_speculative_tokens":3}'
    assert engine_for(p).argv(p) == [
        "vllm", "serve", MODEL, "--tensor-parallel-size", "8", "--trust-remote-code",
        "--host", "127.0.0.1", "--port", "8001", "--served-model-name", "kimi-k2.5",
        "--speculative-config", spec,
    ]  # fmt: skip


def test_sglang_eagle3_argv(stock_profiles: Path) -> None:
    p = _stock(stock_profiles)["sglang-eagle3"].profile
    assert _argv(p) == (
        f"python3 -m sglang.launch_server --model-path {MODEL} --tp-size 8 --trust-remote-code "
        "--host 127.0.0.1 --port 30000 --enable-metrics --served-model-name kimi-k2.5 "
        f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {DRAFTER} "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
    )


def test_profile_change_shows_in_argv(stock_profiles: Path) -> None:
    p = _stock(stock_profiles)["vllm-eagle3"].profile
    assert p.speculative is not None
    changed = p.model_copy(
        update={
            "speculative": p.speculative.model_copy(
                update={"draft_model": "/d2", "num_speculative_tokens": 5}
            )
        }
    )
    argv = engine_for(changed).argv(changed)
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "eagle3", "model": "/d2", "num_speculative_tokens": 5}

    s = _stock(stock_profiles)["sglang-eagle3"].profile
    assert s.speculative is not None
    s2 = s.model_copy(update={"speculative": s.speculative.model_copy(update={"num_speculative_tokens": 5})})
    argv = engine_for(s2).argv(s2)
    assert argv[argv.index("--speculative-num-steps") + 1] == "5"


def test_optional_flags_and_extra_args() -> None:
    p = Profile(
        name="x", engine="vllm", model="/m", port=9000, host="10.0.0.1", tensor_parallel_size=2,
        gpus=[0, 1], memory_fraction=0.9, extra_args=["--max-model-len", "8192"], trust_remote_code=False,
    )  # fmt: skip
    assert _argv(p) == (
        "vllm serve /m --tensor-parallel-size 2 --host 10.0.0.1 --port 9000 "
        "--gpu-memory-utilization 0.9 --max-model-len 8192"
    )
    s = p.model_copy(update={"engine": "sglang"})
    assert "--mem-fraction-static 0.9" in _argv(s)


def test_command_overrides_argv_but_engine_stays() -> None:
    p = Profile(name="patched", engine="sglang", model="/m", port=9000, command=["/opt/wrap.sh", "--x"])
    engine = engine_for(p)
    assert engine.argv(p) == ["/opt/wrap.sh", "--x"]
    assert engine.name == "sglang"
    assert engine.health_path(p) == "/health"


def test_environment_pins_the_profile_gpus() -> None:
    p = Profile(name="x", engine="vllm", model="/m", port=9000, tensor_parallel_size=2, gpus=[2, 3],
                environment={"VLLM_USE_V1": "1"})  # fmt: skip
    env = engine_for(p).environment(p)
    assert env == {"CUDA_VISIBLE_DEVICES": "2,3", "VLLM_USE_V1": "1"}


def test_engine_caches_live_under_the_persistent_cache_root(stock_profiles: Path) -> None:
    valid = _stock(stock_profiles)
    base, sgl = valid["baseline"].profile, valid["sglang-eagle3"].profile
    env = engine_for(base).environment(base, Path("/var/cache/k25-ctl/engines"))
    assert env["VLLM_CACHE_ROOT"] == "/var/cache/k25-ctl/engines/vllm"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/var/cache/k25-ctl/engines/torchinductor"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert "FLASHINFER_WORKSPACE_BASE" in engine_for(sgl).environment(sgl, Path("/c"))
    # The profile's own variables win; without a cache root nothing is added.
    mine = base.model_copy(update={"environment": {"VLLM_CACHE_ROOT": "/fast/nvme"}})
    assert engine_for(mine).environment(mine, Path("/c"))["VLLM_CACHE_ROOT"] == "/fast/nvme"
    assert "VLLM_CACHE_ROOT" not in engine_for(base).environment(base)


def test_lora_adapters_are_rendered_and_each_has_a_known_answer_request() -> None:
    """Issue 52: a profile's LoRA adapters, as each engine takes them, and the request that proves each
    after a wake (vLLM serves an adapter as a model of its name, SGLang by the request's lora_path)."""
    adapters = {"sql": "/srv/lora/sql", "code": "/srv/lora/code"}
    v = Profile(name="v", engine="vllm", model="/m", port=8000, lora_adapters=adapters)
    s = Profile(name="s", engine="sglang", model="/m", port=8001, lora_adapters=adapters)
    assert " --enable-lora --lora-modules sql=/srv/lora/sql code=/srv/lora/code" in shlex.join(
        engine_for(v).argv(v)
    )
    assert " --enable-lora --lora-paths sql=/srv/lora/sql code=/srv/lora/code" in shlex.join(
        engine_for(s).argv(s)
    )
    assert [r.adapter for r in requests_for(v)] == ["", "", "", "code", "sql"]
    assert engine_for(v).adapter_fields("sql") == {"model": "sql"}
    assert engine_for(s).adapter_fields("sql") == {"lora_path": "sql"}
    with pytest.raises(ValueError, match="adapter 'SQL/x'"):
        Profile(name="b", engine="vllm", model="/m", port=8002, lora_adapters={"SQL/x": "/p"})
