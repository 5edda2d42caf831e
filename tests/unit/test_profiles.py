"""Profile validation: every invalid case names the file and the key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from daemon.core.profiles import InvalidProfile
from daemon.engines.checks import load_checked_profiles as load_profiles

GOOD = """
engine = "vllm"
model = "{model}"
port = {port}
tensor_parallel_size = 2
gpus = [0, 1]
"""


def _write(d: Path, name: str, text: str) -> Path:
    p = d / f"{name}.toml"
    p.write_text(text)
    return p


def _only_invalid(d: Path, name: str, *, check_paths: bool = False) -> InvalidProfile:
    result = load_profiles(d, check_paths=check_paths)
    bad = [i for i in result.invalid if i.name == name]
    assert len(bad) == 1, result.invalid
    return bad[0]


@pytest.mark.parametrize(
    ("text", "key", "fragment"),
    [
        (GOOD.format(model="/m", port=9000) + "colour = 'red'\n", "colour", "unknown key"),
        ('engine = "vllm"\nport = 9000\n', "model", "missing required key"),
        (
            GOOD.format(model="/m", port=9000) + 'unit = "../../etc/evil.service"\n',
            "unit",
            "not a valid systemd",
        ),
        (GOOD.format(model="/m", port=9000) + 'unit = "engine.socket"\n', "unit", "not a valid systemd"),
        (
            GOOD.format(model="/m", port=9000).replace(
                "tensor_parallel_size = 2", "tensor_parallel_size = 4"
            ),
            "tensor_parallel_size",
            "larger than the 2 GPUs",
        ),
        (GOOD.format(model="/m", port=9000) + 'name = "../x"\n', "name", "path separators"),
        ('engine = "custom"\nmodel = "/m"\nport = 9000\n', "command", "explicit command"),
        (
            'engine = "custom"\nmodel = "/m"\nport = 9000\ncommand = ["/bin/x"]\n',
            "health_path",
            "health_path",
        ),
        (
            GOOD.format(model="/m", port=9000) + "[speculative]\nnum_speculative_tokens = 3\n",
            "speculative.draft_model",
            "missing required key",
        ),
        (GOOD.format(model="/m", port=9000) + 'log_ignore = ["(unclosed"]\n', "log_ignore", "not a regular"),
        (GOOD.format(model="/m", port=99999), "port", "less than or equal"),
        ("engine = [broken\n", "(file)", "cannot be read as TOML"),
    ],
)
def test_invalid_profile_names_file_and_key(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    path = _write(tmp_path, "bad", text)
    inv = _only_invalid(tmp_path, "bad")
    assert inv.file == path
    assert any(p.key == key and fragment in p.message for p in inv.problems), inv.problems
    assert str(path) in str(inv)
    assert repr(key) in str(inv)


def test_name_must_match_file(tmp_path: Path) -> None:
    _write(tmp_path, "alpha", GOOD.format(model="/m", port=9000) + 'name = "beta"\n')
    inv = _only_invalid(tmp_path, "alpha")
    assert inv.problems[0].key == "name"


def test_missing_model_path_when_checked(tmp_path: Path) -> None:
    _write(tmp_path, "ghost", GOOD.format(model=tmp_path / "nope", port=9000))
    assert load_profiles(tmp_path).valid  # not checked by default
    inv = _only_invalid(tmp_path, "ghost", check_paths=True)
    assert inv.problems[0].key == "model"
    assert "does not exist" in inv.problems[0].message
    (tmp_path / "nope").mkdir()
    assert "ghost" in load_profiles(tmp_path, check_paths=True).valid


def test_port_clash_names_both(tmp_path: Path) -> None:
    _write(tmp_path, "a", GOOD.format(model="/m", port=9000))
    path_b = _write(tmp_path, "b", GOOD.format(model="/m", port=9000))
    result = load_profiles(tmp_path)
    assert list(result.valid) == ["a"]
    inv = _only_invalid(tmp_path, "b")
    assert inv.file == path_b
    assert inv.problems[0].key == "port"
    assert "'a'" in inv.problems[0].message


def test_one_bad_file_does_not_hide_the_good_ones(tmp_path: Path, stock_profiles: Path) -> None:
    for f in stock_profiles.glob("*.toml"):
        shutil.copy(f, tmp_path)
    _write(tmp_path, "broken", "this is not toml = = =")
    _write(tmp_path, "typo", GOOD.format(model="/m", port=9100) + "tensor_paralel_size = 8\n")
    result = load_profiles(tmp_path)
    assert sorted(result.valid) == ["baseline", "sglang-eagle3", "vllm-eagle3"]
    assert sorted(i.name for i in result.invalid) == ["broken", "typo"]


def test_sglang_rejects_unsupported_speculative_method(tmp_path: Path) -> None:
    text = GOOD.format(model="/m", port=9000).replace('"vllm"', '"sglang"')
    _write(tmp_path, "s", text + '[speculative]\nmethod = "ngram"\ndraft_model = "/d"\n')
    inv = _only_invalid(tmp_path, "s")
    assert inv.problems[0].key == "speculative.method"


def test_hash_and_default_unit(tmp_path: Path) -> None:
    _write(tmp_path, "exp", GOOD.format(model="/m", port=9000))
    lp = load_profiles(tmp_path).valid["exp"]
    assert lp.profile.unit == "k25-engine@exp.service"
    assert len(lp.sha256) == 64


def test_missing_directory_is_reported_not_raised(tmp_path: Path) -> None:
    result = load_profiles(tmp_path / "absent")
    assert result.valid == {}


def test_service_port_puts_every_engine_on_one_port(tmp_path: Path) -> None:
    _write(tmp_path, "a", GOOD.format(model="/m", port=9000))
    _write(tmp_path, "b", GOOD.format(model="/m", port=9001))
    _write(tmp_path, "c", GOOD.format(model="/m", port=9000) + 'command = ["serve", "--port", "{port}"]\n')
    result = load_profiles(tmp_path, service_port=8000)
    assert sorted(result.valid) == ["a", "b", "c"]  # the same port is no clash: one engine at a time
    assert {lp.profile.port for lp in result.valid.values()} == {8000}
    from daemon.engines import engine_for

    a, c = result.valid["a"].profile, result.valid["c"].profile
    assert engine_for(a).argv(a)[engine_for(a).argv(a).index("--port") + 1] == "8000"
    assert engine_for(c).argv(c) == ["serve", "--port", "8000"]  # {port} in a command
    without = load_profiles(tmp_path)
    assert without.valid["b"].profile.port == 9001  # without it, each its own
    assert "c" not in without.valid  # and the same port is a clash
