"""The page under its own strict Content-Security-Policy (no inline script or style) in real Chromium: it
works with no console error, and server strings with HTML in them (a profile file's name, an error text)
render as text (#23)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k25_sandbox.layout import fake_engine_profile
from k25_sandbox.ports import free_port
from k25_sandbox.sandbox import SandboxInfo
from tests.sandboxing import Api
from tests.waiting import eventually_sync
from tests.web.pages import errors_of

NAMED = "<img src=x onerror=window.__xss=1>"  # a profile file named with HTML in it
IN_ERROR = "<img src=x onerror=window.__xss=2>"  # HTML in an error text (a model path that is not there)


def test_the_page_works_under_a_strict_csp_and_shows_html_as_text(
    strict_page: Any, api: Api, sandbox: SandboxInfo, tmp_path: Path
) -> None:
    page = strict_page
    api.activate("baseline")
    csp = api.client.get("/").headers["content-security-policy"]
    assert "unsafe-inline" not in csp
    assert "script-src 'self';" in csp
    assert "style-src 'self';" in csp
    profiles = Path(sandbox.dir) / "etc/profiles.d"
    text = fake_engine_profile("x", flavor="vllm", port=free_port(), models=tmp_path, load_seconds=1)
    named = profiles / f"{NAMED}.toml"
    named.write_text(text.replace('description = "x', 'description = "named'))
    bad_model = profiles / "html-in-error.toml"
    bad_model.write_text(
        text.replace(f'model = "{tmp_path / "Kimi-K2.5-INT4"}"', f'model = "/nowhere/{IN_ERROR}"')
    )
    try:
        api.client.post("/profiles/reload")
        errors = errors_of(page)
        page.goto(sandbox.url + "/")

        def shown() -> str | None:
            table = str(page.inner_text("#profiles"))
            return table if NAMED in table and IN_ERROR in table else None

        table = eventually_sync(shown, what="both strings on the page, as text", within_s=20) or ""
        assert "does not exist" in table
        assert page.locator("#profiles img").count() == 0  # text, not elements
        assert page.evaluate("() => window.__xss") is None
        # The rest of the page works under the CSP: state, charts (uPlot draws through the CSSOM), bars.
        state = eventually_sync(lambda: page.inner_text("#state") in ("active", "ACTIVE") and "shown",
                                what="the state shown", within_s=15, tolerate=(AssertionError,))  # fmt: skip
        assert state, page.inner_text("#state")
        width = page.evaluate(
            "() => { const d = document.querySelector('.bar.mem > div'); return [d.dataset.w, d.style.width]; }"
        )
        assert width[1] == width[0] + "%", width  # data-w applied through the CSSOM, not a style attribute
        eventually_sync(lambda: page.evaluate("() => !!document.querySelector('#chart-serving canvas')"),
                        what="the serving chart drawn", within_s=20)  # fmt: skip
        assert [e for e in errors if "Content Security Policy" in e] == []
        assert errors == []
    finally:
        named.unlink()
        bad_model.unlink()
        api.client.post("/profiles/reload")
