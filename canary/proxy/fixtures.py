"""The fixture server: one page per run, at a URL that carries the run's nonce."""

from __future__ import annotations

from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route


class Pages(Protocol):
    """Where the fixture server finds a run's page: the runs in flight."""

    def fetch_page(self, nonce: str, path: str = "") -> str | None:
        """The page of the run with this nonce, recording the fetch of ``path``; None when no run is live."""


def create_fixture_server(registry: Pages) -> Starlette:
    """``GET /r/{nonce}[/...]`` serves the run's page and records the path fetched; anything else is 404."""

    async def page(request: Request) -> Response:
        nonce = request.path_params["nonce"]
        text = registry.fetch_page(nonce, request.url.path)
        if text is None:
            return PlainTextResponse("no such run, or it has expired\n", status_code=404)
        return HTMLResponse(text, headers={"cache-control": "no-store"})

    async def missing(request: Request) -> Response:
        return PlainTextResponse("not found\n", status_code=404)

    return Starlette(
        routes=[
            Route("/r/{nonce:str}", page, methods=["GET", "HEAD"]),
            Route("/r/{nonce:str}/{rest:path}", page, methods=["GET", "HEAD"]),
            Route("/{rest:path}", missing),
        ]
    )
