"""The fixture server: one page per run, at a URL that carries the run's nonce.

It answers only requests whose Host is a loopback name or one of its listen names (403
otherwise), so a DNS-rebinding page cannot read a run's page. Only a GET counts as the
agent's fetch; a HEAD is answered without being recorded.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from canary.proxy.serving import host_allowed


class Pages(Protocol):
    """Where the fixture server finds a run's page: the runs in flight."""

    def fetch_page(self, nonce: str, path: str = "", *, record: bool = True) -> str | None:
        """The run's page, recording ``path`` (and the fetch if ``record``); None when no run is live."""


class _HostCheck:
    """ASGI middleware: 403 for any Host that is not loopback or an allowed name."""

    def __init__(self, app: ASGIApp, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not host_allowed(host, self.allowed_hosts):
                response = PlainTextResponse("this server answers only requests addressed to a loopback "
                                             "host\n", status_code=403)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def create_fixture_server(registry: Pages, *, allowed_hosts: Collection[str] = ()) -> Starlette:
    """``GET /r/{nonce}[/...]`` serves the run's page and records the path fetched; anything else is 404."""

    async def page(request: Request) -> Response:
        nonce = request.path_params["nonce"]
        text = registry.fetch_page(nonce, request.url.path, record=request.method == "GET")
        if text is None:
            return PlainTextResponse("no such run, or it has expired\n", status_code=404)
        return HTMLResponse(text, headers={"cache-control": "no-store"})

    async def missing(request: Request) -> Response:
        return PlainTextResponse("not found\n", status_code=404)

    app = Starlette(
        routes=[
            Route("/r/{nonce:str}", page, methods=["GET", "HEAD"]),
            Route("/r/{nonce:str}/{rest:path}", page, methods=["GET", "HEAD"]),
            Route("/{rest:path}", missing),
        ]
    )
    app.add_middleware(_HostCheck, allowed_hosts=allowed_hosts)
    return app
