"""The k25.ctl collection's modules (contrib/ansible) run in-process against a stub of the daemon's HTTP
API on a loopback port: what each sends (check mode asks /plans and switches nothing; the token goes
with writes only), what it returns (idempotence, diff, a failed switch's rollback, the gate's verdict),
and the fleet verdict filter. The real daemon behind them: tests/system/test_fleet.py."""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "contrib/ansible"))
Reply = tuple[int, Any]


class Truncated:
    """An answer cut off mid-body: its Content-Length promises more than is sent (the daemon killed)."""


class Stub:
    """Answers per (method, path without query); records each request (method, path with query, body,
    Authorization)."""

    def __init__(self, routes: dict[tuple[str, str], Reply | Callable[[], Reply]]) -> None:
        self.routes = routes
        self.seen: list[tuple[str, str, Any, str | None]] = []

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                stub.seen.append((self.command, self.path, body, self.headers.get("Authorization")))
                found = stub.routes.get(
                    (self.command, self.path.split("?")[0]), (404, {"detail": "no route"})
                )
                status, data = found() if callable(found) else found
                raw = json.dumps(data).encode() if not isinstance(data, Truncated) else b'data: {"phase"'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header(
                    "Content-Length", str(len(raw) + (100 if isinstance(data, Truncated) else 0))
                )
                self.end_headers()
                self.wfile.write(raw)
                if isinstance(data, Truncated):
                    self.close_connection = True

            do_GET = do_POST = _answer

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


@contextlib.contextmanager
def serving(stub: Stub) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), stub.handler())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_module(name: str, args: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The module's main() with `args` (its _ansible_* ones too), its JSON answer; `failed` where it failed."""
    import importlib

    from ansible.module_utils.testing import patch_module_args  # type: ignore[import-untyped]

    module = importlib.import_module(f"ansible_collections.k25.ctl.plugins.modules.{name}")
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


PLAN = {"profile": "vllm-eagle3", "from_profile": "baseline", "state": "active", "switch": True,
        "reason": "baseline serves now (active): vllm-eagle3 would cold start", "refused": None,
        "away": "drain, then stop", "start": "cold start", "estimate_s": 12.5}  # fmt: skip
RUN = {"id": 7, "kind": "switch", "profile": "vllm-eagle3", "outcome": "active", "error": None,
       "switch_cost": {"downtime_s": 4.2}}  # fmt: skip
PROFILE = {"name": "vllm-eagle3", "valid": True, "known_answer": {
    "run_id": 7, "recorded_at": "2026-12-03T10:00:00",
    "agreement": {"other": "baseline", "equal": True, "from_first_token": False, "text": "equal"}}}  # fmt: skip


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    return path


def _common(url: str, token: Path) -> dict[str, Any]:
    return {"url": url, "token_file": str(token)}


def test_a_switch_runs_drained_and_returns_its_run(token: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stub = Stub({
        ("POST", "/plans"): (200, PLAN),
        ("POST", "/profiles/vllm-eagle3/activate"): (202, {"run_id": 7}),
        ("GET", "/runs/7"): (200, RUN),
        ("GET", "/runs/7/events"): (200, {}),
        ("GET", "/profiles/vllm-eagle3"): (200, PROFILE),
    })  # fmt: skip
    with serving(stub) as url:
        out = run_module(
            "k25_profile", _common(url, token) | {"name": "vllm-eagle3", "_ansible_diff": True}, capsys
        )
    assert out["changed"] is True, out
    assert (out["run_id"], out["outcome"], out["downtime_s"], out["from_profile"]) == (
        7,
        "active",
        4.2,
        "baseline",
    )
    assert out["diff"] == {"before": "profile: baseline\n", "after": "profile: vllm-eagle3\n"}
    assert out["known_answer"]["agreement"]["from_first_token"] is False
    sent = [(m, p) for m, p, _, _ in stub.seen]
    assert ("POST", "/profiles/vllm-eagle3/activate?drain=true&force=false") in sent
    assert stub.seen[0][2] == {"activate": "vllm-eagle3", "drain": True, "force": False}
    assert all(auth == "Bearer s3cret" for m, _, _, auth in stub.seen if m == "POST")
    assert all(auth is None for m, _, _, auth in stub.seen if m == "GET")  # reads go without the token


def test_check_mode_and_an_active_profile_switch_nothing(
    token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Already serving: the module says whether this activation (serving run 40) was gated: the gate
    # benchmark of an earlier activation (serving run 30) does not count.
    gates = [{"run_id": 52, "serving_run_id": 40, "outcome": "ok", "spec": {"gate": {"min_relative": 0.9}}},
             {"run_id": 51, "serving_run_id": 40, "outcome": "ok", "spec": {}},
             {"run_id": 31, "serving_run_id": 30, "outcome": "ok", "spec": {"gate": {"min_relative": 0.9}}}]  # fmt: skip
    stub = Stub({
        ("POST", "/plans"): (200, PLAN),
        ("GET", "/status"): (200, {"serving_run_id": 40}),
        ("GET", "/benchmarks"): (200, gates),
        ("GET", "/benchmarks/52"): (200, {"gate": {"passed": True, "text": "98% of this host's normal"}}),
        ("GET", "/profiles/vllm-eagle3"): (200, PROFILE),
    })  # fmt: skip
    with serving(stub) as url:
        planned = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3", "_ansible_check_mode": True},
                             capsys)  # fmt: skip
        stub.routes[("POST", "/plans")] = (200, PLAN | {"switch": False, "from_profile": "vllm-eagle3"})
        same = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3"}, capsys)
        stub.routes[("GET", "/status")] = (200, {"serving_run_id": 41})  # another activation: never gated
        ungated = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3"}, capsys)
    assert (planned["changed"], planned["outcome"], planned["plan"]["start"]) == (
        True,
        "planned",
        "cold start",
    )
    assert (same["changed"], same["outcome"]) == (False, "unchanged")
    assert same["gate"] == {"run_id": 52, "passed": True, "text": "98% of this host's normal"}
    assert same["known_answer"]["agreement"]["equal"] is True
    assert ungated["gate"] is None
    assert not any("/activate" in p for _, p, _, _ in stub.seen)  # never an activate


def test_a_failed_switch_fails_the_task_with_its_rollback(
    token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = RUN | {"outcome": "failed", "error": "the engine exited while loading"}
    stub = Stub({
        ("POST", "/plans"): (200, PLAN),
        ("POST", "/profiles/vllm-eagle3/activate"): (202, {"run_id": 7}),
        ("GET", "/runs/7"): (200, failed),
        ("GET", "/runs/7/events"): (200, {}),
        # The rollback still runs when the switch's run has ended: the module follows it to its end.
        ("GET", "/runs"): (200, [{"id": 8, "kind": "rollback", "profile": "baseline", "outcome": "running"}]),
        ("GET", "/runs/8"): (200, {"id": 8, "kind": "rollback", "profile": "baseline", "outcome": "active"}),
        ("GET", "/runs/8/events"): (200, {}),
    })  # fmt: skip
    with serving(stub) as url:
        out = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3"}, capsys)
    assert out["failed"] is True
    assert out["rollback"] == {"run_id": 8, "profile": "baseline", "outcome": "active"}
    assert out["msg"] == ("the switch to vllm-eagle3 ended failed: the engine exited while loading; "
                          "rolled back to baseline (run 8): active")  # fmt: skip
    assert ("GET", "/runs?parent=7") in [(m, p) for m, p, _, _ in stub.seen]


def test_refusals_and_bad_credentials_say_why(
    tmp_path: Path, token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = PLAN | {"switch": False, "refused": "benchmark run 5 is in progress"}
    stub = Stub({("POST", "/plans"): (200, busy)})
    with serving(stub) as url:
        refused = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3"}, capsys)
        stub.routes[("POST", "/plans")] = (404, {"detail": "no valid profile 'nope'"})
        unknown = run_module("k25_profile", _common(url, token) | {"name": "nope"}, capsys)
        no_token = run_module(
            "k25_profile", {"url": url, "token_file": str(tmp_path / "absent"), "name": "x"}, capsys
        )
    assert refused["msg"] == "k25-ctl would refuse the switch: benchmark run 5 is in progress"
    assert unknown["msg"] == f"k25-ctl at {url} answered 404: no valid profile 'nope'"
    assert no_token["failed"] is True
    assert f"cannot read the k25-ctl token from {tmp_path / 'absent'}" in no_token["msg"]
    down = run_module("k25_status_info", {"url": "http://127.0.0.1:9"}, capsys)
    assert down["failed"] is True, down
    assert "did not answer" in down["msg"], down


def test_the_benchmark_gate_holds_the_host_to_its_own_normal(
    token: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The module sends the gate with the benchmark (the daemon records it) and goes by the daemon's
    verdict; a measurement is never `changed`."""
    relative = {"throughput": 66.0, "baseline": 82.5, "baseline_runs": 3, "ratio": 0.8}
    said = "66.0 tok/s, 80% of this host's normal 82.5 tok/s (median of 3 runs); the gate asks for 90%"
    verdict = {"min_relative": 0.9, "require_normal": False, "passed": False, "text": said}
    bench = {
        "run_id": 9,
        "profile": "baseline",
        "output_throughput": 66.0,
        "relative": relative,
        "gate": verdict,
    }
    stub = Stub({
        ("POST", "/benchmarks"): (202, {"run_id": 9}),
        ("GET", "/runs/9"): (200, {"id": 9, "outcome": "ok", "error": None}),
        ("GET", "/runs/9/events"): (200, {}),
        ("GET", "/benchmarks/9"): (200, bench),
    })  # fmt: skip
    spec = {"concurrency": [4], "num_prompts": 16}
    with serving(stub) as url:
        slow = run_module(
            "k25_benchmark", _common(url, token) | {"benchmark": spec, "min_relative": 0.9}, capsys
        )
        stub.routes[("GET", "/benchmarks/9")] = (200, bench | {"gate": verdict | {"passed": True}})
        strict = run_module(
            "k25_benchmark",
            _common(url, token) | {"benchmark": spec, "min_relative": 0.75, "require_normal": True},
            capsys,
        )
        stub.routes[("GET", "/benchmarks/9")] = (200, bench | {"gate": None})
        plain = run_module("k25_benchmark", _common(url, token) | {"benchmark": spec}, capsys)
    assert slow["failed"] is True
    assert slow["passed"] is False
    assert slow["msg"] == f"baseline: {said}"
    assert (strict["passed"], strict["changed"], strict.get("failed")) == (True, False, None)
    assert (plain["passed"], plain["changed"]) == (True, False)
    sent = [body for m, _, body, _ in stub.seen if m == "POST"]
    assert sent[0] == spec | {"gate": {"min_relative": 0.9, "require_normal": False}}
    assert sent[1]["gate"] == {"min_relative": 0.75, "require_normal": True}
    assert sent[2] == spec  # no gate asked: none recorded


def test_a_daemon_lost_mid_switch_is_said_in_words(token: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 55: the run's event stream breaks off mid-answer (the daemon killed); the module asks again,
    finds the run interrupted and the run that resumed it, and fails saying so, not with IncompleteRead."""
    answers = iter(
        [RUN | {"outcome": "running"}, RUN | {"outcome": "interrupted", "error": "daemon restarted"}]
    )
    stub = Stub({
        ("POST", "/plans"): (200, PLAN),
        ("POST", "/profiles/vllm-eagle3/activate"): (202, {"run_id": 7}),
        ("GET", "/runs/7"): lambda: (200, next(answers)),
        ("GET", "/runs/7/events"): (200, Truncated()),
        ("GET", "/runs"): (200, [{"id": 8, "kind": "switch", "profile": "vllm-eagle3", "outcome": "active"}]),
    })  # fmt: skip
    with serving(stub) as url:
        out = run_module("k25_profile", _common(url, token) | {"name": "vllm-eagle3"}, capsys)
    assert out["failed"] is True
    assert out["msg"] == (
        f"the daemon at {url} closed the connection during the switch to vllm-eagle3 (run 7) and came back; "
        "run 7's outcome: interrupted; resumed the switch to vllm-eagle3 (run 8): active. The host was not "
        "gated on vllm-eagle3"
    )
    assert out["from_profile"] == "baseline"  # what the rollout's rescue restores


def test_status_info(capsys: pytest.CaptureFixture[str]) -> None:
    status = {"state": "active", "active_profile": "baseline", "reason": None, "strays": [], "gpu_error": None,
              "parked": [{"profile": "vllm-eagle3"}]}  # fmt: skip
    profiles = [{"name": "baseline", "valid": True, "default": True, "parked": False, "known_answer": None},
                PROFILE | {"default": False, "parked": True}, {"name": "bad", "valid": False}]  # fmt: skip
    benchmarks = [{"run_id": 4, "profile": "baseline", "outcome": "ok", "output_throughput": 82.1,
                   "started_at": "t2"},
                  {"run_id": 3, "profile": "baseline", "outcome": "ok", "output_throughput": 80.0,
                   "started_at": "t1"}]  # fmt: skip
    stub = Stub({("GET", "/status"): (200, status), ("GET", "/profiles"): (200, profiles),
                 ("GET", "/benchmarks"): (200, benchmarks)})  # fmt: skip
    with serving(stub) as url:
        facts = run_module("k25_status_info", {"url": url}, capsys)
    assert "ansible_facts" not in facts  # an _info module returns data, it sets no facts
    assert (facts["state"], facts["active_profile"], facts["parked"], facts["gpus_clean"]) == (
        "active", "baseline", ["vllm-eagle3"], True,
    )  # fmt: skip
    assert set(facts["profiles"]) == {"baseline", "vllm-eagle3"}
    assert facts["profiles"]["baseline"]["benchmark"]["run_id"] == 4  # the newest
    assert facts["profiles"]["vllm-eagle3"]["known_answer"] == {
        "run_id": 7, "equal_to_default": True, "differs_from_first_token": False,
    }  # fmt: skip


def test_the_fleet_verdict_is_what_the_hosts_own_verdicts_agree_on() -> None:
    from ansible_collections.k25.ctl.plugins.filter.fleet_verdict import (  # type: ignore[import-not-found]
        fleet_verdict,
    )

    def host(verdict: str | None, speedup: float | None) -> dict[str, Any]:
        return {"results": [{"profile": "baseline", "verdict": "baseline", "speedup": 1.0},
                            {"profile": "sglang-eagle3", "verdict": verdict, "speedup": speedup}]}  # fmt: skip

    all_faster = fleet_verdict(
        {"h1": host("faster", 1.8), "h2": host("faster", 1.7), "h3": host("faster", 1.9)}
    )
    one = all_faster["sglang-eagle3"]
    assert (one["verdict"], one["hosts"], one["faster"]) == ("faster", 3, ["h1", "h2", "h3"])
    assert abs(one["speedup_geomean"] - (1.8 * 1.7 * 1.9) ** (1 / 3)) < 1e-9
    assert one["text"] == "faster on 3 of 3 hosts (speed-up 1.80x, 1.70-1.90)"
    mixed = fleet_verdict({"h1": host("faster", 1.2), "h2": host("slower", 0.8), "h3": host(None, None)})
    assert mixed["sglang-eagle3"]["verdict"] == "mixed"
    assert mixed["sglang-eagle3"]["text"].startswith("mixed: faster on h1, slower on h2")
    none = fleet_verdict({"h1": host("no difference detected", 1.01)})
    assert none["sglang-eagle3"]["verdict"] == "no difference detected"
    assert "baseline" not in all_faster  # each host's baseline is what the others are judged against


def test_the_fleet_interval_is_pooled_from_the_hosts_and_a_slower_host_is_named() -> None:
    """Issue 54: three hosts, one planted 10% slower: outside where the other two, which agree, predict a
    host to fall, so it is named; the others are not (h3 and the other widen each one's prediction); the
    fleet's interval comes from the hosts' own."""
    from ansible_collections.k25.ctl.plugins.filter.fleet_verdict import (
        Z99,
        fleet_verdict,
    )

    def host(ratio: float, half: float) -> dict[str, Any]:
        low, high = ratio * math.exp(-half), ratio * math.exp(half)
        return {"results": [{"profile": "baseline", "verdict": "baseline", "speedup": 1.0},
                            {"profile": "eagle", "verdict": "faster", "speedup": ratio,
                             "interval": [low, high]}]}  # fmt: skip

    got = fleet_verdict({"h1": host(1.30, 0.03), "h2": host(1.31, 0.03), "h3": host(1.30 * 0.9, 0.03)})[
        "eagle"
    ]
    print(got["text"])
    assert [o["host"] for o in got["outliers"]] == ["h3"]
    assert abs(got["outliers"][0]["others"] - (1.30 * 1.31) ** 0.5) < 0.01
    low, high = got["fleet_interval"]
    assert low < got["fleet_ratio"] < high
    assert low < 1.30 * 0.9 < 1.30 < high  # the hosts disagree: the random-effects interval is wide
    agree = fleet_verdict({"h1": host(1.30, 0.03), "h2": host(1.31, 0.03), "h3": host(1.29, 0.03)})["eagle"]
    assert agree["outliers"] == []
    se = 0.03 / Z99 / math.sqrt(3)  # equal hosts, no spread between them: the fixed-effect interval
    a_low, a_high = agree["fleet_interval"]
    assert abs(math.log(a_high / a_low) / 2 - Z99 * se) < 0.002
    assert "fleet 1.30x [" in agree["text"]
    without = fleet_verdict({"h1": host(1.3, 0.03) | {}, "h2": {"results": [{"profile": "baseline"},
                            {"profile": "eagle", "verdict": "faster", "speedup": 1.3}]}})["eagle"]  # fmt: skip
    assert without["outliers"] == []


def test_the_modules_take_ansibles_own_url_options() -> None:
    """Issue 54: the shared spec is Ansible's url_argument_spec (proxies, client certificates, ...) with
    the daemon's URL as the default, plus ca_path, which the request hands to fetch_url."""
    from ansible.module_utils.urls import url_argument_spec  # type: ignore[import-untyped]
    from ansible_collections.k25.ctl.plugins.module_utils.k25_api import (  # type: ignore[import-not-found]
        DEFAULT_URL,
        k25_argument_spec,
    )

    spec = k25_argument_spec()
    assert set(url_argument_spec()) <= set(spec)
    assert spec["url"]["default"] == DEFAULT_URL
    assert {"ca_path", "client_cert", "client_key", "use_proxy", "validate_certs", "timeout"} <= set(spec)
