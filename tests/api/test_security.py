"""Reads without secrets, the Host allowlist, file modes, headers, bounded inputs and streams, the OpenAPI
contract and offline /docs."""

from __future__ import annotations

import asyncio
import stat
from typing import Any

import httpx
import pytest

from daemon.core.errors import StoreError
from daemon.store.queries import Store
from tests.api.conftest import PROFILE, Env, wait_run

SECRET = "sk-live-0123456789abcdef"


async def test_secrets_never_appear_in_reads(env: Env) -> None:
    path = env.settings.profiles_path / "alpha.toml"
    path.write_text(
        path.read_text()
        + f'extra_args = ["--api-key", "{SECRET}"]\n[environment]\nHF_TOKEN = "hf_abcdefghijk"\n'
    )
    env.systemd.crash.add("k25-engine@alpha.service")
    env.journal.log("k25-engine@alpha.service", f"ERROR bad key {SECRET} rejected; HF_TOKEN=hf_abcdefghijk")
    run = (await env.client.post("/profiles/alpha/activate", params={"wait": True}, headers=env.auth)).json()
    await wait_run(env, run["id"])
    reads = [
        (await env.client.get("/profiles")).text,
        (await env.client.get("/profiles/alpha")).text,
        (await env.client.get(f"/runs/{run['id']}")).text,
        (await env.client.get("/runs")).text,
        (await env.client.get(f"/runs/{run['id']}/events")).text,
        (await env.client.get("/status")).text,
    ]
    for text in reads:
        assert SECRET not in text
        assert "hf_abcdefghijk" not in text
    argv = (await env.client.get("/profiles/alpha")).json()["argv"]
    assert argv[-2:] == ["--api-key", "***"]
    # The record itself keeps the truth (root reads the database): only reads are redacted.
    store: Store = env.app.state.services.store
    view = store.get_run(run_id=run["id"])
    assert view is not None
    assert SECRET in (view.run.argv or "")


async def test_a_foreign_host_header_is_refused(env: Env) -> None:
    r = await env.client.get("/status", headers={"Host": "evil.example:8025"})
    assert r.status_code == 400
    assert "not allowed" in r.json()["detail"]
    for ok in ("127.0.0.1:8025", "localhost", "[::1]:8025", "k25"):
        assert (await env.client.get("/healthz", headers={"Host": ok})).status_code == 200, ok


async def test_state_files_are_private(env: Env) -> None:
    db = env.settings.database_path
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700


async def test_security_headers(env: Env) -> None:
    page = await env.client.get("/")
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    for r in (page, await env.client.get("/status")):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"


async def test_out_of_range_ids_and_bad_input_are_4xx_with_one_line(env: Env) -> None:
    huge = 2**63
    for path in (f"/runs/{huge}", f"/runs/{huge}/events", f"/runs/{huge}/metrics", "/runs/0", "/runs/-1"):
        r = await env.client.get(path)
        assert r.status_code == 422, path
        assert isinstance(r.json()["detail"], str)
    assert (await env.client.post(f"/runs/{huge}/cancel", headers=env.auth)).status_code == 422
    assert (await env.client.get(f"/runs/{2**63 - 1}")).status_code == 404
    r = await env.client.get("/runs", params={"limit": "many"})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("invalid request: query.limit")


async def test_a_second_cancel_is_409(env: Env) -> None:
    env.prober.gate.clear()
    run_id = (await env.client.post("/profiles/alpha/activate", headers=env.auth)).json()["run_id"]
    first, second = await asyncio.gather(
        env.client.post(f"/runs/{run_id}/cancel", headers=env.auth),
        env.client.post(f"/runs/{run_id}/cancel", headers=env.auth),
    )
    assert sorted((first.status_code, second.status_code)) == [202, 409]
    env.prober.gate.set()
    assert (await wait_run(env, run_id))["outcome"] == "cancelled"


async def test_event_streams_are_capped(env: Env) -> None:
    gate = env.app.state.sse
    gate.open = (
        gate.limit
    )  # as many streams as allowed are open (httpx's ASGI transport cannot hold one open)
    third = await env.client.get("/events")
    assert third.status_code == 503
    assert "max_sse_streams" in third.json()["detail"]
    assert (await env.client.get("/healthz")).status_code == 200  # the reserve: everything else still answers
    gate.open = 0


async def test_the_gate_counts_streams_and_ends_them_on_shutdown() -> None:
    from daemon.api.http import Overloaded, SseGate

    gate = SseGate(limit=2)
    forever = asyncio.Event()

    async def events() -> Any:
        yield {"state": "idle"}
        await forever.wait()

    streams = [gate.stream(events(), "state") for _ in range(2)]
    with pytest.raises(Overloaded):
        gate.stream(events(), "state")
    bodies: list[Any] = [s.body_iterator for s in streams]
    assert [await anext(b) for b in bodies] == [b'event: idle\ndata: {"state": "idle"}\n\n'] * 2
    pending = [asyncio.ensure_future(anext(b)) for b in bodies]
    gate.stopping.set()  # the daemon stops: open streams end at once
    done, _ = await asyncio.wait(pending, timeout=5)
    assert len(done) == 2
    assert all(isinstance(t.exception(), StopAsyncIteration) for t in done)
    assert gate.open == 0


async def test_a_full_database_refuses_the_switch_cleanly(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    store: Store = env.app.state.services.store

    def full(_: Any) -> int:
        raise StoreError("the runs database failed: OperationalError: database or disk is full")

    monkeypatch.setattr(store, "create_run", full)
    r = await env.client.post("/profiles/alpha/activate", headers=env.auth)
    assert r.status_code == 503
    assert "disk is full" in r.json()["detail"]
    monkeypatch.undo()
    assert (await env.client.get("/status")).json()["state"] == "idle"
    assert (
        await env.client.post("/profiles/alpha/activate", params={"wait": True}, headers=env.auth)
    ).json()["outcome"] == "active"


async def test_openapi_declares_security_errors_and_docs_work_offline(env: Env) -> None:
    spec = (await env.client.get("/openapi.json")).json()
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    activate = spec["paths"]["/profiles/{name}/activate"]["post"]
    assert {"200", "202", "401", "404", "409", "413", "422", "503"} <= set(activate["responses"])
    assert activate["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
    assert activate["security"] == [{"HTTPBearer": []}]
    docs = await env.client.get("/docs")
    assert "/docs-assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower()
    js = await env.client.get("/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200
    assert len(js.content) > 100_000


async def test_a_profile_file_with_a_secret_in_a_bad_key_is_not_echoed_in_reads(env: Env) -> None:
    (env.settings.profiles_path / "oops.toml").write_text(
        PROFILE.format(port=9170) + f'api_key = "{SECRET}"\n'
    )
    r = await env.client.post("/profiles/reload", headers=env.auth)
    assert SECRET not in r.text
    assert SECRET not in (await env.client.get("/profiles")).text


def test_hosts_parse() -> None:
    from daemon.api.http import host_name

    assert [host_name(h) for h in ("127.0.0.1:8025", "[::1]:8025", "[::1]", "localhost", "::1")] == [
        "127.0.0.1", "::1", "::1", "localhost", "::1"]  # fmt: skip
    assert httpx.URL("http://k25/").host == "k25"


@pytest.mark.parametrize(
    ("method", "path", "param"),
    [
        ("GET", "/runs", "parent"),  # answered 500: past SQLite's 64-bit INTEGER
        ("GET", "/runs", "limit"),
        ("POST", "/experiments", "max_running"),
        ("GET", "/ready", "port"),
    ],
)
async def test_every_integer_parameter_past_int64_is_422_with_the_error_shape(
    env: Env, method: str, path: str, param: str
) -> None:
    for value in (2**63, 10000000000000000001):
        r = await env.client.request(
            method, path, params={param: value}, headers=env.auth, json={"profiles": ["x"]}
        )
        assert r.status_code == 422, (param, value, r.text)
        assert r.json()["detail"].startswith(f"invalid request: query.{param}"), r.text
    if param == "parent":
        r = await env.client.get(path, params={param: 2**63 - 1})  # the largest id: a valid question
        assert (r.status_code, r.json()) == (200, [])
