"""The HTTP side: GraphQL at /graphql (HTTP and graphql-transport-ws), the dashboard at /.

The dashboard's pages live after the `#` (hash history), so every path the server has is a file
of the build: anything else (`/favicon.ico` of an old browser, `/api/...`) is a plain 404.

Authentication happens before GraphQL runs: an HTTP request without a valid key gets a plain
401 (not a 200 with an error inside), and a websocket without one is closed at connection_init.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from ariadne import load_schema_from_path, make_executable_schema
from ariadne.asgi import GraphQL
from ariadne.asgi.handlers import GraphQLTransportWSHandler
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from computeall.protocol.limits import GRAPHQL_REQUEST_BYTES

from .context import Context, Services
from .limits import parse_within_limit, validation_rules
from .login_limits import TooManyAttempts
from .mutations import mutation
from .resolvers import BINDABLES
from .subscriptions import subscription

SCHEMA_PATH = Path(__file__).with_name("schema.graphql")
USER_SCOPE_KEY = "computeall.user"

NOT_BUILT = """<!doctype html><html><head><title>computeall monitor</title></head><body>
<h1>computeall monitor</h1>
<p>The dashboard is not built. Build it with <code>make web</code> (or <code>cd web &amp;&amp; npm ci &amp;&amp;
npm run build</code>) and reload this page.</p>
<p>The GraphQL API is at <a href="/graphql">/graphql</a>; send your API key as
<code>Authorization: Bearer KEY</code>.</p></body></html>"""

NOT_FOUND = """<!doctype html><html><head><title>not found · computeall monitor</title></head><body>
<h1>Not found</h1><p>The monitor has nothing at <code>{path}</code>. The dashboard is at <a href="/">/</a>, the
GraphQL API at <a href="/graphql">/graphql</a>.</p></body></html>"""


def schema():
    return make_executable_schema(
        load_schema_from_path(str(SCHEMA_PATH)), *BINDABLES, mutation, subscription, convert_names_case=True
    )


async def _not_found(request: Request, exc: HTTPException) -> HTMLResponse:
    return HTMLResponse(NOT_FOUND.format(path=html.escape(request.url.path)), status_code=404)


def dashboard(web_dir: Path) -> ASGIApp:
    """The built dashboard's files, or the page that says how to build it; any other path is a 404
    page (not the StaticFiles exception, which without this app around it reached uvicorn as a 500)."""
    if (web_dir / "index.html").exists():
        routes = [Mount("/", StaticFiles(directory=str(web_dir), html=True))]
    else:
        routes = [Route("/", lambda request: HTMLResponse(NOT_BUILT))]
    return Starlette(routes=routes, exception_handlers={404: _not_found})


def bearer(headers: list[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def peer(scope: Scope) -> str:
    """Who asks, for the login limits: the address the connection comes from (never a header the client
    writes, such as X-Forwarded-For)."""
    client = scope.get("client")
    return client[0] if client else "an unknown address"


class MonitorApp:
    """Routes /graphql to ariadne behind the key check and everything else to the dashboard."""

    def __init__(self, services: Services, web_dir: Path) -> None:
        self.services = services

        async def on_connect(websocket: Any, payload: Any) -> None:
            params = payload if isinstance(payload, dict) else {}
            key = params.get("apiKey") or params.get("api_key") or bearer(websocket.scope["headers"])
            try:
                user = services.auth.login(key, peer(websocket.scope))
            except TooManyAttempts as exc:
                raise PermissionError(str(exc)) from None
            if user is None:
                raise PermissionError("missing or invalid API key")
            websocket.scope[USER_SCOPE_KEY] = user

        def context(request: Any, data: Any) -> Context:
            return Context(user=request.scope[USER_SCOPE_KEY], services=services)

        self.graphql = GraphQL(
            schema(),
            context_value=context,
            query_parser=parse_within_limit,
            validation_rules=validation_rules,
            websocket_handler=GraphQLTransportWSHandler(on_connect=on_connect),
        )
        self.site = dashboard(web_dir)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"].rstrip("/") != "/graphql":
            if scope["type"] == "websocket":  # only /graphql speaks websocket: refused before accepting
                await send({"type": "websocket.close", "code": 1008})
            else:
                await self.site(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] == "POST":
            try:
                user = self.services.auth.login(bearer(scope["headers"]), peer(scope))
            except TooManyAttempts as exc:
                await _reply(send, 429, str(exc), [(b"retry-after", str(exc.retry_after_s).encode())])
                return
            if user is None:
                await _unauthorized(send)
                return
            scope[USER_SCOPE_KEY] = user
            body = await _body_within_limit(receive)
            if body is None:
                await _reply(send, 413, f"the request body is over {GRAPHQL_REQUEST_BYTES:,} bytes; send a smaller query")
                return
            receive = _replay(body, receive)
        await self.graphql(scope, receive, send)


async def _body_within_limit(receive: Receive) -> bytes | None:
    """The whole request body, or None as soon as it grows past the limit (the rest is never read)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None  # the client went away
        body += message.get("body", b"")
        if len(body) > GRAPHQL_REQUEST_BYTES:
            return None
        if not message.get("more_body"):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the body already read, then what the client sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict:
        return pending.pop() if pending else await receive()

    return replayed


async def _unauthorized(send: Send) -> None:
    await _reply(send, 401, "missing or invalid API key: send `Authorization: Bearer KEY` "
                            "(create one with `computeall user create NAME`)", [(b"www-authenticate", b"Bearer")])


async def _reply(send: Send, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    """A plain HTTP error whose body has GraphQL's error shape."""
    body = json.dumps({"errors": [{"message": message}]}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})
    await send({"type": "http.response.body", "body": body})
