"""The daemon's HTTP edges, in one place: the Host allowlist (DNS rebinding), the body size limit, security
headers, errors as `{"detail": "..."}` for every status (validation included), the SSE stream cap and the
streams' end on shutdown, and /docs served from the daemon's own copy of Swagger UI (no CDN)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from daemon.core.errors import K25Error
from daemon.core.jsontypes import ForeignJson
from daemon.core.settings import Settings

log = logging.getLogger("k25.api")
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# Nothing may come from elsewhere. The page's script and styles are files the daemon serves: no inline
# script or style runs there, so text that slipped into markup could not act. /docs (Swagger UI's own
# page) carries its script inline.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"
)
DOCS_CSP = CSP.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'").replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)


class Overloaded(K25Error):
    status_code = 503


def host_name(header: str) -> str:
    """The name in a Host header, without its port (`[::1]:8025` -> `::1`)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_hosts(settings: Settings) -> set[str]:
    names = {*LOOPBACK_NAMES, *settings.allowed_hosts}
    if settings.bind_host not in ("0.0.0.0", "::", ""):  # noqa: S104 - compared, not bound
        names.add(settings.bind_host)
    return {n.lower() for n in names}


def sse_frame(name: object, event: Mapping[str, object]) -> bytes:
    return f"event: {name or 'message'}\ndata: {json.dumps(event, default=str)}\n\n".encode()


class SseGate:
    """At most `limit` open event streams (each holds a socket and a task); all of them end when the daemon
    stops, so a restart never waits on a browser tab."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.stopping = asyncio.Event()

    def stream(self, events: AsyncIterator[Mapping[str, object] | bytes], name: str) -> StreamingResponse:
        """Each event a JSON object (named by its `name` field), or a frame already rendered (bytes: one
        serialization shared by every stream)."""
        if self.open >= self.limit:
            raise Overloaded(
                f"{self.open} event streams are open (max_sse_streams = {self.limit}); try later"
            )
        self.open += 1

        async def body() -> AsyncIterator[bytes]:
            stop = asyncio.ensure_future(self.stopping.wait())
            try:
                while True:
                    nxt = asyncio.ensure_future(anext(events))
                    done, _ = await asyncio.wait({nxt, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if nxt not in done:
                        nxt.cancel()
                        return
                    try:
                        event = nxt.result()
                    except StopAsyncIteration:
                        return
                    yield event if isinstance(event, bytes) else sse_frame(event.get(name), event)
            finally:
                stop.cancel()
                self.open -= 1

        return StreamingResponse(
            body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )


def _allowed(app: FastAPI, request: Request) -> list[str]:
    """The methods of the resource at this path: of the routes that match it, those with the fewest path
    parameters (POST /profiles/reload is its own resource, not GET /profiles/{name} named "reload")."""
    found: list[tuple[int, str]] = []
    routes: list[BaseRoute] = getattr(app.state, "api_routes", [])  # FastAPI hides them in included routers
    for method in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"):
        for route in routes:
            match, child = route.matches(dict(request.scope, method=method))
            if match is Match.FULL:
                found.append((len(child.get("path_params") or {}), method))
                break
    fewest = min((n for n, _ in found), default=0)
    return [m for n, m in found if n == fewest]


# Requests that may carry the operator's prompts (a dataset's file).
PROMPT_PATHS = ("/benchmarks", "/experiments", "/plans", "/datasets")


def _body_limit(method: str, path: str, settings: Settings) -> int | None:
    """None: the route reads the body under its own limit (the capture sink counts what it refuses)."""
    if method == "POST" and path in PROMPT_PATHS:
        return settings.max_prompts_body_bytes
    if method == "POST" and path.startswith("/capture/v1/"):
        return None
    return settings.max_body_bytes


def install(app: FastAPI, settings: Settings) -> None:
    """The app's edges: Host and body checks with security headers, errors as JSON, its own /docs."""
    _install_edges(app, settings)
    _install_errors(app)
    _install_docs(app)


def _install_edges(app: FastAPI, settings: Settings) -> None:
    app.add_middleware(Edges, settings=settings)


class Edges:
    """Host and body-size checks before a request reaches a route, security headers on every answer. Plain
    ASGI (no BaseHTTPMiddleware: it costs each request a task and a memory stream)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings
        self.hosts = allowed_hosts(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        name = host_name(headers.get("host", "")).lower()
        length = headers.get("content-length", "0")
        refusal: Response | None = None
        if name not in self.hosts:
            refusal = JSONResponse(
                {"detail": f"host {name!r} is not allowed (allowed_hosts setting)"}, status_code=400
            )
        elif (limit := _body_limit(scope["method"], scope["path"], self.settings)) is not None and (
            not length.isdigit() or int(length) > limit
        ):
            refusal = JSONResponse({"detail": f"request body over {limit} bytes"}, status_code=413)

        async def send_headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                for key, value in HEADERS.items():
                    out[key] = value
                if out.get("content-type", "").startswith("text/html"):
                    out["Content-Security-Policy"] = DOCS_CSP if scope["path"] == "/docs" else CSP
            await send(message)

        if refusal is not None:
            await refusal(scope, receive, send_headed)
        else:
            await self.app(scope, receive, send_headed)


def _install_errors(app: FastAPI) -> None:
    """Library errors were translated into K25Error where they happen; here each becomes its status."""

    @app.exception_handler(K25Error)
    async def _k25_error(request: Request, exc: K25Error) -> JSONResponse:
        if exc.status_code >= 500 and not isinstance(exc, Overloaded):  # a flood must not flood the journal
            log.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return JSONResponse({"detail": f"invalid request: {where}"}, status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route whose path matches; a path served by the read and the
            # write routers (GET and POST /benchmarks) takes the methods of all of them.
            headers["Allow"] = ", ".join(_allowed(app, request)) or headers.get("Allow", "")
        return JSONResponse({"detail": str(exc.detail)}, status_code=exc.status_code, headers=headers)


def _install_docs(app: FastAPI) -> None:
    def openapi() -> ForeignJson:
        """FastAPI's document, with the bearer marked optional on reads (open unless reads_require_token)."""
        if app.openapi_schema is None:
            spec = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
            for path in spec["paths"].values():
                for op in path.values():
                    op.setdefault("security", [{}, {"HTTPBearer": []}])
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi_json() -> JSONResponse:
        # Built once, off the event loop: ~200 ms of pydantic schema work (the API tier's slow-step guard
        # caught FastAPI's own route blocking the loop that long on the first read).
        return JSONResponse(await asyncio.to_thread(app.openapi))

    import swagger_ui_bundle  # the daemon's own copy of Swagger UI

    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_bundle.swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="k25-ctl API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon-32x32.png",
        )
