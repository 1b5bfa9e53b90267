"""The daemon's control API on loopback, its bearer token, and the client the CLI uses.

Every route but ``/metrics`` needs ``Authorization: Bearer <token>``; the token lives in a file
of the state directory that only its owner can read. Any request a browser could have sent is
refused before the token is even looked at: one carrying an ``Origin`` header, a
``Sec-Fetch-Site`` other than ``none``, or a ``Host`` that is not a loopback name or address
(a DNS-rebinding page reaches 127.0.0.1 under its own host name). ``/metrics`` needs no token,
so Prometheus can scrape it, but the browser and Host rules still hold.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from collections.abc import Callable, Collection
from datetime import date, datetime
from pathlib import Path
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from canary.daemon.token import TOKEN_FILE, ensure_token, read_token, token_path
from canary.errors import CanaryError, UnavailableError, UsageError
from canary.proxy.serving import host_allowed, split_listen
from canary.vocabulary import iso

__all__ = [
    "METRICS_CONTENT_TYPE",
    "TOKEN_FILE",
    "ControlClient",
    "ControlHandlers",
    "connect",
    "create_control_app",
    "ensure_token",
    "read_token",
    "token_path",
]

log = logging.getLogger(__name__)

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Largest ``POST /run`` body read; a selection of guard names is a few hundred bytes.
MAX_BODY = 64 * 1024
#: Seconds a client has to send a whole request body (request heads have their own deadline:
#: ``canary.proxy.serving.HEADER_TIMEOUT``).
BODY_TIMEOUT = 10.0
_OPEN_PATHS = frozenset({"/metrics"})


# -- the app -----------------------------------------------------------------


class ControlHandlers(Protocol):
    """What the daemon does for the control API; each call may block, so it runs in a thread."""

    def health(self) -> dict[str, object]:
        """``{"ok": true, "pid", "since", "heartbeat", "files", "proxy", "fixtures"}``."""
        ...

    def status(self) -> dict[str, object]:
        """The ``canary status --json`` document."""
        ...

    def run_now(self, selection: list[str], wait: bool) -> dict[str, object]:
        """Run canaries now: ``{"runs": [...]}`` when waiting, else ``{"queued": [...]}``.

        Raises ``UsageError`` for a selection naming no known guard or canary.
        """
        ...


def _default(value: object) -> object:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class _JSON(JSONResponse):
    """JSON with datetimes as ISO-8601 UTC, never cached."""

    def __init__(self, content: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> None:
        super().__init__(content, status_code, headers={"cache-control": "no-store", **(headers or {})})

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, default=_default).encode("utf-8")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return _JSON({"error": message}, status_code=status, headers=headers)


class _Guard:
    """ASGI middleware: the browser, Host and token rules, before any route runs."""

    def __init__(self, app: ASGIApp, token: str, allowed_hosts: Collection[str]) -> None:
        self.app = app
        self.token = token.encode("utf-8")
        self.allowed_hosts = tuple(allowed_hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def refusal(self, request: Request) -> Response | None:
        """The response that refuses the request, or None when it may go on."""
        headers = request.headers
        if not host_allowed(headers.get("host", ""), self.allowed_hosts):
            return _error(403, "the control API answers only requests addressed to a loopback host")
        if "origin" in headers:
            return _error(403, "requests from a browser page (with an Origin header) are refused")
        if headers.get("sec-fetch-site", "none").strip().lower() != "none":
            return _error(403, "requests from a browser page (Sec-Fetch-Site) are refused")
        if request.url.path in _OPEN_PATHS:
            return None
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        given = credentials.strip().encode("utf-8")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given, self.token):
            return _error(
                401, f"a valid bearer token is required (it is in {TOKEN_FILE} in the state directory)",
                headers={"www-authenticate": "Bearer"},
            )
        return None


async def _read_body(request: Request) -> bytes | None:
    """The request body, or None when it is larger than MAX_BODY."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_run(body: bytes) -> tuple[list[str], bool] | str:
    """The selection and wait flag of a ``POST /run`` body, or what is wrong with it."""
    if not body.strip():
        return [], True
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return f"the body is not JSON: {exc}"
    if not isinstance(doc, dict):
        return 'the body must be a JSON object like {"select": ["citation"], "wait": true}'
    unknown = sorted(set(doc) - {"select", "wait"})
    if unknown:
        return f"unknown key(s) {', '.join(map(repr, unknown))}; expected 'select' and 'wait'"
    select = doc.get("select", [])
    if not isinstance(select, list) or not all(isinstance(s, str) and s for s in select):
        return "'select' must be a list of guard or guard/canary names"
    wait = doc.get("wait", True)
    if not isinstance(wait, bool):
        return "'wait' must be true or false"
    return select, wait


def create_control_app(
    token: str,
    handlers: ControlHandlers,
    *,
    metrics: Callable[[], bytes] | None = None,
    allowed_hosts: Collection[str] = (),
    body_timeout: float = BODY_TIMEOUT,
) -> Starlette:
    """The control API: ``GET /health``, ``/status``, ``POST /run`` and, given ``metrics``, ``GET /metrics``.

    ``allowed_hosts`` adds Host names accepted beside loopback ones, for a daemon that was
    explicitly allowed to listen beyond loopback.
    """
    if not token:
        raise ValueError("the control API needs a non-empty token")

    async def health(request: Request) -> Response:
        return _JSON(await run_in_threadpool(handlers.health))

    async def status(request: Request) -> Response:
        return _JSON(await run_in_threadpool(handlers.status))

    async def run(request: Request) -> Response:
        try:
            async with asyncio.timeout(body_timeout):
                body = await _read_body(request)
        except TimeoutError:
            return _error(408, f"the request body did not arrive within {body_timeout:g} s",
                          headers={"connection": "close"})
        if body is None:
            return _error(413, f"the body is larger than {MAX_BODY} bytes")
        parsed = _parse_run(body)
        if isinstance(parsed, str):
            return _error(400, parsed)
        selection, wait = parsed
        try:
            result = await run_in_threadpool(handlers.run_now, selection, wait)
        except UsageError as exc:
            return _error(400, str(exc))
        except CanaryError as exc:
            return _error(503, str(exc))
        return _JSON(result)

    async def serve_metrics(request: Request) -> Response:
        assert metrics is not None
        text = await run_in_threadpool(metrics)
        return Response(text, media_type=METRICS_CONTENT_TYPE, headers={"cache-control": "no-store"})

    async def missing(request: Request) -> Response:
        return _error(404, f"no such endpoint: {request.method} {request.url.path}")

    routes = [
        Route("/health", health, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/run", run, methods=["POST"]),
    ]
    if metrics is not None:
        routes.append(Route("/metrics", serve_metrics, methods=["GET"]))
    routes.append(Route("/{rest:path}", missing))
    app = Starlette(routes=routes)
    app.add_middleware(_Guard, token=token, allowed_hosts=allowed_hosts)
    return app


# -- the client ----------------------------------------------------------------


def _client_address(address: str) -> str:
    """Where to reach a daemon listening on ``address``: an any-address bind is reached on loopback."""
    host, port = split_listen(address)
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class ControlClient:
    """Talks to a running daemon's control API."""

    def __init__(self, address: str, token: str, timeout: float = 10.0) -> None:
        self.address = _client_address(address)
        # trust_env=False: a proxy from HTTP_PROXY must never see the token or relay loopback calls.
        self._http = httpx.Client(
            base_url=f"http://{self.address}",
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
            trust_env=False,
        )

    def close(self) -> None:
        """Release the connection pool."""
        self._http.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def health(self) -> dict[str, Any] | None:
        """The daemon's health, or None when nothing answers on the address (the daemon is down)."""
        try:
            response = self._http.get("/health")
        except httpx.TransportError:
            return None
        return self._document(response)

    def status(self) -> dict[str, Any]:
        """The ``canary status --json`` document, from the daemon."""
        return self._document(self._request("GET", "/status"))

    def run(self, selection: list[str], *, wait: bool = True, timeout: float = 900) -> dict[str, Any]:
        """Run canaries in the daemon: ``{"runs": [...]}`` when waiting, else ``{"queued": [...]}``."""
        body = {"select": list(selection), "wait": wait}
        return self._document(self._request("POST", "/run", json=body, timeout=timeout))

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise UnavailableError(f"the daemon at {self.address} did not answer {path} in time") from exc
        except httpx.TransportError as exc:
            raise UnavailableError(f"cannot reach the daemon at {self.address}: {exc}") from exc

    def _document(self, response: httpx.Response) -> dict[str, Any]:
        try:
            doc = response.json()
        except ValueError:
            doc = None
        message = doc.get("error") if isinstance(doc, dict) else None
        if response.status_code == 400:
            raise UsageError(str(message or response.text))
        if response.status_code == 401:
            raise UnavailableError(
                f"the daemon at {self.address} refused the control token; it may have been "
                f"replaced since the daemon started (restart the daemon)"
            )
        if response.status_code != 200 or not isinstance(doc, dict):
            what = message or f"HTTP {response.status_code}"
            raise UnavailableError(f"the daemon at {self.address} answered {response.url.path}: {what}")
        return doc


def connect(address: str, token_file: Path | None = None) -> ControlClient | None:
    """A client for the daemon at ``address``, or None when there is no token or no daemon answers."""
    token = read_token(token_file)
    if token is None:
        return None
    client = ControlClient(address, token)
    try:
        if client.health() is None:
            client.close()
            return None
    except BaseException:
        client.close()
        raise
    return client
