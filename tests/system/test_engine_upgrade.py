"""The engines as installed, in the sandbox: the fakes carry a package version (its metadata on the
profile's path) and print their flags as the real engines do; a profile is checked against them at every
reload, and an upgrade of the engine under a profile is noticed by the next switch to it, which records a
second known answer and reports how it differs (no false alarm), while a comparison across the two
versions says it crosses them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from k25_sandbox import fake_install
from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.ports import free_port
from tests.sandboxing import Api

NEW = "0.40.0"  # the fake vLLM drops --old-rate from this version on (fake_install.OLD_RATE_GONE)
SPEC = {"concurrency": [1], "num_prompts": 3, "max_tokens": 32, "warmups": 0}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sbx.SandboxInfo, Api, Path]]:
    extra = tmp_path_factory.mktemp("upgrade-profiles")
    models = tmp_path_factory.mktemp("models")
    make_models(models)
    for name, args in (("old-flag", ("--old-rate", "60")), ("typo", ("--lod-seconds", "1"))):
        text = fake_engine_profile(
            name, flavor="vllm", port=free_port(), models=models, load_seconds=0.5, engine_args=args
        )
        (extra / f"{name}.toml").write_text(text)
    info = sbx.up(profiles=extra, load_seconds=0.5, binds=(models,))
    yield info, Api(info), models
    sbx.down(info)


def _profiles(api: Api) -> dict[str, Any]:
    return {p["name"]: p for p in api.client.get("/profiles").json()}


def _bench(api: Api, profile: str) -> Any:
    api.activate(profile)
    r = api.client.post("/benchmarks", json=SPEC)
    assert r.status_code == 202, r.text
    run = api.wait_run(r.json()["run_id"], within_s=120)
    assert run["outcome"] == "ok", run
    return api.client.get(f"/benchmarks/{run['id']}").json()


def test_profiles_are_checked_against_the_installed_flags_and_an_upgrade_is_noticed(
    host: tuple[sbx.SandboxInfo, Api, Path],
) -> None:
    info, api, models = host
    before = api.profiles_checked()
    base = before["baseline"]
    assert (base["engine_version"], base["engine_package"]) == ("0.32.0", "vllm")
    assert before["sglang-eagle3"]["engine_version"] == fake_install.DEFAULT_VERSIONS["sglang"]
    typo = before["typo"]
    assert not typo["valid"]
    assert "--lod-seconds: not a flag of vLLM 0.32.0; did you mean --load-seconds?" in typo["error"]
    old = before["old-flag"]
    assert old["valid"], old
    assert any(
        "--old-rate: vLLM 0.32.0's help says: deprecated: use --rate" in n for n in old["engine_notes"]
    )

    api.activate("vllm-eagle3")
    first = api.run(api.activate("baseline")["id"])  # a cold start on 0.32.0: its known answer recorded
    assert first["engine_version"] == "0.32.0"
    assert any(e["detail"].startswith("known answer recorded") for e in first["events"])
    old_bench = _bench(api, "baseline")
    assert old_bench["provenance"]["engine_version"] == "0.32.0"

    # pip installs the next vLLM under every profile: the packages' folders change.
    for folder in (Path(info.dir) / "models" / ".engines" / "vllm", models / ".engines" / "vllm"):
        fake_install.install(folder, "vllm", NEW)
    r = api.client.post("/profiles/reload")
    assert r.status_code == 200, r.text
    after = _profiles(api)
    assert after["baseline"]["engine_version"] == NEW
    gone = after["old-flag"]
    assert not gone["valid"]
    assert f"--old-rate: not a flag of vLLM {NEW}; did you mean --rate?" in gone["error"]

    # The next switch to baseline says the engine changed, and records its answer anew: no false alarm.
    api.activate("sglang-eagle3")
    switch = api.activate("baseline")
    run = api.run(switch["id"])
    assert (run["outcome"], run["engine_version"]) == ("active", NEW)
    details = [e["detail"] for e in run["events"]]
    assert any("the engine changed since run" in d and f"0.32.0 -> {NEW}" in d for d in details), details
    answered = [d for d in details if d.startswith("known answer recorded")]
    assert answered, details
    assert f"the engine changed (0.32.0 -> {NEW}): against run" in answered[0], answered
    assert "not what run" not in answered[0]  # the old version's answer is not called corrupt
    assert f"against run {first['id']}'s answer: the same tokens" in answered[0], answered

    # A benchmark on the new version beside one on the old: the comparison says it crosses them.
    new_bench = _bench(api, "vllm-eagle3")
    assert new_bench["provenance"]["engine_version"] == NEW
    compared = api.client.get("/compare", params={"baseline": "baseline"}).json()
    assert any(f"cross vllm versions (0.32.0, {NEW})" in n for n in compared["notes"]), compared["notes"]
