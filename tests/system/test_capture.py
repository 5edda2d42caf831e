"""Verdicts on the operator's own traffic, end to end: Debian's nginx in front of a sandbox host mirrors
every completion request to k25-ctl's capture sink (the manual's snippet, docs/capture.md). A client sends 300 requests of
mixed categories (five in six are code) through nginx: every answer is complete; the capture holds the
sample rate's share with each request's own parameters and category, and no header; nothing captured is
in an anonymous read, /runs or the journal. Then the verdict flips because of the data: the speculative
profile (its drafter accepts 0.9 on code, nothing on chat; a draft costs 0.18 of a step) is slower than
baseline on the built-in prompts and faster on the captured, code-heavy traffic; per category both say the
same."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from k25_sandbox import sandbox as sbx
from k25_sandbox.layout import fake_engine_profile, make_models
from k25_sandbox.mirror import nginx
from k25_sandbox.ports import free_port
from tests.sandboxing import Api, inside

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx: scripts/setup.sh installs it")
K25 = str(Path(sys.executable).parent / "k25-ctl")
MARK = "zebracorn"  # in every prompt the clients send: it must appear nowhere but in the admin's export
RATE = 0.5
CODE = [
    f"Write a Python function that parses {MARK} log lines into a dict of counters",
    f"Implement a bash script that rotates the {MARK} files and compresses old ones",
    f"Refactor this code: def total(xs): return sum(x for x in xs if x) # {MARK}",
]
CHAT = [
    f"Tell me a short story about a {MARK} that learns to sing",
    f"What should I pack for a weekend of hiking near the {MARK} lake",
]
# Nominal speed-ups (k = 5: a step of 1 + 5 x 0.18 = 1.9 token times emits 5.5 tokens on code, 1 on chat):
# 2.89x on code, 0.53x on chat; on the built-in prompts (one in four is code) 0.64x measured, on the
# captured traffic (five in six) 1.55x. Either verdict holds while a stall of this busy machine (a real
# vLLM starting beside the test) takes up to ~25% of one profile's benchmark. The drafter before (0.7 on
# code, 0.1 on chat, a draft cost of 0.3: 1.24x and 0.78x) lost its "faster" to a stall of ~15% in CI.
SPEC = {"concurrency": [8], "max_tokens": 64, "warmups": 1}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[sbx.SandboxInfo, int]]:
    """A host with capture on (half the mirrored requests kept), every profile on one service port, and
    a speculative profile whose acceptance depends on the prompt's topic."""
    folder = tmp_path_factory.mktemp("capture-profiles")
    models = folder / "models"
    make_models(models)
    text = fake_engine_profile(
        "eagle-topics",
        flavor="vllm",
        port=free_port(),
        models=models,
        load_seconds=1.0,
        rate=82.5,  # the baseline's token rate: drafting alone makes the difference
        spec={"k": 5, "acceptance": 0.0},
        engine_args=("--topic-acceptance", "code=0.9,chat=0.0", "--draft-cost", "0.18"),
    )
    (folder / "eagle-topics.toml").write_text(text)
    service = free_port()
    settings = {"service_port": str(service), "capture": f"{{enabled = true, sample_rate = {RATE}}}"}
    info = sbx.up(load_seconds=1.0, profiles=folder, settings=settings, binds=(models,))
    try:
        yield info, service
    finally:
        sbx.down(info)


def _traffic(url: str) -> list[tuple[dict[str, object], bool]]:
    """300 requests, 16 at a time: (the body sent, whether its answer was complete)."""
    bodies: list[tuple[dict[str, object], str]] = []
    for i in range(300):
        code = i % 6 != 5
        prompts = CODE if code else CHAT
        body = {"model": "kimi-k2.5", "prompt": f"{prompts[i % len(prompts)]} #{i}", "max_tokens": 64,
                "temperature": 0.2 if code else 0.9, "top_p": 0.95, "stop": ["\n\n"], "user": f"user-{i}"}  # fmt: skip
        bodies.append((body, "ide" if code else "chat"))
    results: list[tuple[dict[str, object], bool]] = []
    lock = threading.Lock()

    def client(mine: list[tuple[dict[str, object], str]]) -> None:
        with httpx.Client(timeout=60) as c:
            for body, app in mine:
                headers = {
                    "X-App": app,
                    "Authorization": "Bearer sk-client-api-key",
                    "Cookie": "session=s3cr3t",
                }
                r = c.post(f"{url}/v1/completions", json=body, headers=headers)
                done = (
                    r.status_code == 200 and len(r.json()["choices"][0]["text"].split()) == body["max_tokens"]
                )
                with lock:
                    results.append((body, done))

    threads = [threading.Thread(target=client, args=(bodies[k::16],)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def _cli(info: sbx.SandboxInfo, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"K25_CONFIG": info.config, "PATH": "/usr/bin:/bin"}
    return subprocess.run([K25, *args], capture_output=True, text=True, timeout=120, env=env)


def _experiment(api: Api, dataset: str, prompts: int = 96) -> dict[str, Any]:
    spec = SPEC | {"dataset": dataset, "num_prompts": prompts}
    body = {"profiles": ["baseline", "eagle-topics"], "benchmark": spec}
    r = api.client.post("/experiments", json=body)
    assert r.status_code == 202, r.text
    run = api.wait_run(r.json()["run_id"], within_s=240)
    assert run["outcome"] == "ok", run
    exp = api.client.get(f"/experiments/{run['id']}").json()
    bench = exp["steps"][1]["benchmark_run_ids"][0]
    spec_hash = api.client.get(f"/benchmarks/{bench}").json()["spec_hash"]
    cmp = api.client.get("/compare", params={"baseline": "baseline", "benchmark_spec": spec_hash}).json()
    return {row["profile"]: row for row in cmp["rows"]}


def test_captured_traffic_flips_the_verdict(host: tuple[sbx.SandboxInfo, int], tmp_path: Path) -> None:
    info, service = host
    api = Api(info)
    api.activate("baseline")
    token = (Path(info.config).parent / "capture-token").read_text().strip()
    with nginx(port=free_port(), engine_port=service, daemon_port=info.port, token=token) as proxy:
        results = _traffic(proxy.url)
        # The mirror's copies may still be on their way when the clients have their answers.
        api.wait_until(lambda: api.client.get("/capture").json()["since_start"]["received"] == 300,
                       what="every request mirrored", within_s=30)  # fmt: skip
        assert "[error]" not in proxy.errors(), proxy.errors()[-2000:]
    assert len(results) == 300
    assert all(done for _, done in results), [b for b, done in results if not done][:3]

    anonymous = httpx.Client(base_url=info.url, timeout=30)
    cap = anonymous.get("/capture").json()
    counts = cap["since_start"]
    assert (counts["kept"] + counts["sampled_out"], counts["rejected"]) == (300, 0)
    # The sample rate's share: 150 expected, binomial sd 8.7 (this band fails once in ~10^5 runs).
    assert 110 <= counts["kept"] <= 190, counts
    api.wait_until(lambda: anonymous.get("/capture").json()["rows"] == counts["kept"], what="rows written")
    # What was kept: each request's prompt, parameters and category; never a header, a key or a user id.
    export = api.client.get("/capture/export").text
    sent = {str(b["prompt"]): b for b, _ in results}
    rows = [json.loads(line) for line in export.splitlines()]
    assert len(rows) == counts["kept"]
    for row in rows:
        body = sent[row["prompt"]]
        want = {k: body[k] for k in ("max_tokens", "temperature", "top_p", "stop")}
        assert row["params"] == want, row
        assert row["category"] == ("chat" if body["temperature"] == 0.9 else "code")
    for secret in ("sk-client-api-key", "s3cr3t", "user-", "X-App", "Bearer"):
        assert secret not in export
    assert anonymous.get("/capture/export").status_code == 401  # the text is the admin's only

    made = api.client.post("/datasets/from-capture", json={"name": "prod"})
    assert made.status_code == 201, made.text
    assert made.json()["prompts"] == counts["kept"]
    assert set(made.json()["categories"]) == {"code", "chat"}

    builtin = _experiment(api, "builtin")
    # The whole captured set, every chat request in it (25 expected of the ~150 kept): its first 96 held
    # fewer than the 10 a category needs on each side in about one run of 25 ("too few requests" in CI).
    captured = _experiment(api, "prod", prompts=counts["kept"])
    print(
        {
            n: (r["speedup"], r["verdict"], r["per_category"])
            for n, r in (builtin | {"prod": captured["eagle-topics"]}).items()
        }
    )
    assert builtin["eagle-topics"]["verdict"] == "slower"
    assert captured["eagle-topics"]["verdict"] == "faster"
    for rows_ in (builtin, captured):
        cats = rows_["eagle-topics"]["categories"]
        assert cats["code"]["verdict"] == "faster", cats
        assert cats["code"]["acceptance_length"] > 5.0  # 1 + 5 x 0.9
    assert builtin["eagle-topics"]["categories"]["chat"]["verdict"] == "slower"
    assert captured["eagle-topics"]["categories"]["chat"]["verdict"] == "slower"
    assert "on code" in captured["eagle-topics"]["per_category"]
    bench = api.client.get(f"/benchmarks/{captured['eagle-topics']['run_ids'][0]}").json()
    assert bench["provenance"]["dataset"] == "prod"
    assert "max_tokens" in bench["provenance"]["output_lengths"]

    # Nothing captured in an anonymous read, the runs, or the daemon's journal.
    for path in ("/capture", "/status", "/runs?limit=100", "/datasets", "/datasets/prod", "/compare", "/"):
        text = anonymous.get(path).text
        assert MARK not in text, path
    for run in api.client.get("/runs", params={"limit": 100}).json():
        assert MARK not in json.dumps(api.run(run["id"])), run["id"]
    journal = inside(info, "journalctl", "-u", "k25-ctl.service", "--no-pager", "-o", "cat")
    assert journal.returncode == 0
    assert "dataset prod" in journal.stdout
    assert MARK not in journal.stdout

    # The CLI says the same: per category under the table, the capture's counts, and a bad file refused
    # with its line named.
    table = _cli(info, "compare", "--spec", bench["spec_hash"])
    assert table.returncode == 0, table.stderr
    assert re.search(r"^eagle-topics: \d\.\d\dx on code, 0\.\d\dx on chat$", table.stdout, re.M), table.stdout
    assert MARK not in table.stdout
    status = _cli(info, "capture", "status")
    assert f"kept      {counts['kept']} request(s)" in status.stdout, status.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": "broken"\n')
    refused = _cli(info, "datasets", "import", "broken", str(bad))
    assert refused.returncode != 0
    assert "line 2: " in refused.stderr + refused.stdout
    exported = tmp_path / "capture.jsonl"
    assert _cli(info, "capture", "export", str(exported)).returncode == 0
    assert (exported.stat().st_mode & 0o777, len(exported.read_text().splitlines())) == (
        0o600,
        counts["kept"],
    )

    purged = api.client.delete("/capture")
    assert purged.json()["deleted"] == counts["kept"]
    assert anonymous.get("/capture").json()["rows"] == 0
    assert api.client.get("/datasets/prod").json()["prompts"] == counts["kept"]  # a copy: it stays


def test_with_capture_off_the_sink_stores_nothing(api: Api) -> None:
    """The session's sandbox runs with capture off (the default): the sink answers 404, stores nothing."""
    token = (Path(api.info.config).parent / "capture-token").read_text().strip()
    r = httpx.post(f"{api.info.url}/capture/v1/completions", json={"prompt": MARK},
                   headers={"Authorization": f"Bearer {token}"}, timeout=10)  # fmt: skip
    assert r.status_code == 404, r.text
    st = api.client.get("/capture").json()
    assert (st["enabled"], st["rows"], st["since_start"]["received"]) == (False, 0, 0)
