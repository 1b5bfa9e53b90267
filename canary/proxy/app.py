"""The model proxy: relays everything to the upstream model server byte for byte, and answers the
model calls its interceptor picks with a scripted assistant message in the client's dialect.

Passthrough: the request body is buffered (the interceptor scans it, and the upstream gets
an exact Content-Length); the response is relayed raw as it arrives, with its status, its
headers (less hop-by-hop ones and Content-Length) and its Content-Encoding.
A client that goes away cancels the upstream exchange at once, before or after the first byte.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from canary.proxy import dialects
from canary.proxy.dialects import Dialect
from canary.proxy.toolcalls import ToolCall

__all__ = [
    "MODEL_PATHS", "Dialect", "Interceptor", "ModelCall", "create_proxy", "model_call", "requested_stream",
]

log = logging.getLogger(__name__)

#: Where each dialect is served; OpenAI-style paths with and without the ``/v1`` prefix.
MODEL_PATHS: dict[str, Dialect] = {
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
    "/v1/completions": "completions",
    "/completions": "completions",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/api/chat": "ollama-chat",
    "/api/generate": "ollama-generate",
}

# RFC 7230 §6.1 hop-by-hop headers, plus the framing headers the proxy recomputes.
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization",
    b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade",
})
# ``expect`` too: the proxy has already answered any 100-continue and holds the whole body.
_REQUEST_DROP = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
_RESPONSE_DROP = _HOP_BY_HOP | {b"content-length"}
_BODY_FRAMING = frozenset({b"content-length", b"transfer-encoding"})
_NO_BODY_STATUS = frozenset({204, 304})
_JSON_SPACE = b" \t\r\n"
_STREAM_KEY = b'"stream'
_TIMEOUT_PHASES: dict[type[Exception], str] = {
    httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read",
    httpx.WriteTimeout: "write", httpx.PoolTimeout: "pool",
}


@dataclass(frozen=True)
class ModelCall:
    """One model call as the proxy received it."""

    path: str  # request path as received, e.g. "/v1/chat/completions" or "/api/chat"
    dialect: Dialect
    body: bytes  # the raw request body
    stream: bool  # the stream mode the client asked for (Ollama native: streaming unless "stream": false)


class Interceptor(Protocol):
    """Decides, per model call, whether the proxy answers with scripted text."""

    def intercept(self, call: ModelCall) -> str | ToolCall | None:
        """The scripted assistant text (or tool call) to answer with, or None to pass the call through."""
        ...


def model_call(method: str, path: str, body: bytes) -> ModelCall | None:
    """The model call a request is, or None when it is not one of the dialect endpoints."""
    if method != "POST":
        return None
    dialect = MODEL_PATHS.get(path)
    if dialect is None:
        return None
    return ModelCall(path, dialect, body, requested_stream(body, dialects.DEFAULT_STREAM[dialect]))


def requested_stream(body: bytes, default: bool) -> bool:
    """The request's ``"stream": true|false`` read from the raw bytes, without parsing the JSON.

    The search runs from the end, where the SDKs put ``stream`` (after ``messages``), so it
    usually stops at once; a ``"stream`` preceded by a backslash sits inside a string, and one
    not followed by ``: true|false`` is some other value, so both are skipped. A flag nested in
    an object after the top-level one would win; the scripted answer parses the JSON anyway.
    """
    end = len(body)
    while (start := body.rfind(_STREAM_KEY, 0, end)) >= 0:
        value = _flag_at(body, start)
        if value is not None:
            return value
        end = start
    return default


def _flag_at(body: bytes, start: int) -> bool | None:
    at = start + len(_STREAM_KEY)
    if body[at : at + 1] != b'"' or (start and body[start - 1] == 0x5C):
        return None
    size = len(body)
    at += 1
    while at < size and body[at] in _JSON_SPACE:
        at += 1
    if body[at : at + 1] != b":":
        return None
    at += 1
    while at < size and body[at] in _JSON_SPACE:
        at += 1
    if body.startswith(b"true", at):
        return True
    if body.startswith(b"false", at):
        return False
    return None


def create_proxy(
    upstream: str | None,
    interceptor: Interceptor | None = None,
    *,
    client: httpx.AsyncClient | None = None,
    connect_timeout: float = 5.0,
    read_timeout: float | None = None,
) -> Starlette:
    """The proxy as an ASGI app; with no ``client``, it makes one and closes it on shutdown.

    ``upstream`` is the model server's base URL (``http://127.0.0.1:11434``); None answers 503
    to everything the interceptor does not script.
    """
    owned = client is None
    if client is None:
        client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
            follow_redirects=False,
            trust_env=False,
        )
    timeout = httpx.Timeout(connect=connect_timeout, read=read_timeout, write=60.0, pool=30.0)
    handler = _ProxyHandler(upstream, interceptor, client, timeout)
    shared = client

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owned:
                await shared.aclose()

    app = Starlette(routes=[Route("/{path:path}", endpoint=handler)], lifespan=lifespan)
    app.state.client = client
    app.state.upstream = upstream
    return app


class _Exchange:
    """What the disconnect watcher and the relay share about one passthrough."""

    __slots__ = ("client_gone", "finished")

    def __init__(self) -> None:
        self.client_gone = False
        self.finished = False


class _ProxyHandler:
    """The ASGI endpoint behind every path."""

    def __init__(
        self,
        upstream: str | None,
        interceptor: Interceptor | None,
        client: httpx.AsyncClient,
        timeout: httpx.Timeout,
    ) -> None:
        self.upstream = upstream.rstrip("/") if upstream else None
        self.interceptor = interceptor
        self.client = client
        self.extensions: dict[str, Any] = {"timeout": timeout.as_dict()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return  # the client left before it finished sending
        path: str = scope["path"]
        if self.interceptor is not None:
            call = model_call(scope["method"], path, body)
            if call is not None:
                text = self._intercept(call)
                if text is not None:
                    await _send_scripted(send, call.dialect, body, text)
                    return
        if self.upstream is None:
            await _send_error(
                send, path, 503, "upstream_not_configured",
                "the canary proxy has no upstream model server configured ([model] upstream in canary.toml)",
            )
            return
        await self._relay(scope, receive, send, body)

    def _intercept(self, call: ModelCall) -> str | ToolCall | None:
        assert self.interceptor is not None
        try:
            return self.interceptor.intercept(call)
        except Exception:
            # The agent's own traffic must keep flowing whatever the canary bookkeeping does.
            log.exception("the interceptor failed on %s; passing the call through", call.path)
            return None

    def _request(self, scope: Scope, body: bytes) -> httpx.Request:
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        target = raw_path + b"?" + query if query else raw_path
        headers = []
        had_body = False
        request_headers: list[tuple[bytes, bytes]] = scope["headers"]
        named = _connection_tokens(request_headers)
        for name, value in request_headers:
            low = name.lower()
            if low in _BODY_FRAMING:
                had_body = True
            if low in _REQUEST_DROP or low in named:
                continue
            headers.append((name, value))
        if had_body and not body:
            headers.append((b"content-length", b"0"))  # httpx leaves it out for an empty body
        return httpx.Request(
            scope["method"],
            f"{self.upstream}{target.decode('latin-1')}",
            headers=headers,
            content=body if body or had_body else None,
            extensions=self.extensions,
        )

    async def _relay(self, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
        request = self._request(scope, body)
        task = asyncio.current_task()
        assert task is not None
        exchange = _Exchange()
        watcher = asyncio.get_running_loop().create_task(_watch_disconnect(receive, task, exchange))
        try:
            await self._exchange(request, scope, send, exchange)
        except asyncio.CancelledError:
            if exchange.client_gone and task.uncancel() == 0:
                return  # our own cancellation: the client went away
            raise
        except OSError:
            # httpx wraps its own socket errors, so this came from ``send``: ASGI 2.4 servers
            # raise it when the client has gone, before any http.disconnect reaches the watcher.
            return
        finally:
            exchange.finished = True
            watcher.cancel()

    async def _exchange(self, request: httpx.Request, scope: Scope, send: Send, exchange: _Exchange) -> None:
        path: str = scope["path"]
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            phase = _TIMEOUT_PHASES.get(type(exc), "request")
            await _send_error(
                send, path, 504, "upstream_timeout",
                f"the model server at {self.upstream} did not answer in time ({phase} timeout)",
            )
            return
        except httpx.ConnectError as exc:
            await _send_error(
                send, path, 502, "upstream_unavailable",
                f"the model server at {self.upstream} is not reachable: {exc or 'connection failed'}",
            )
            return
        except httpx.TransportError as exc:
            await _send_error(
                send, path, 502, "upstream_error",
                f"the model server at {self.upstream} broke off the exchange: "
                f"{exc or type(exc).__name__}",
            )
            return
        try:
            head = scope["method"] == "HEAD" or response.status_code in _NO_BODY_STATUS
            await send({
                "type": "http.response.start",
                "status": response.status_code,
                "headers": _response_headers(response.headers.raw, keep_length=head),
            })
            # With a known length, the last piece closes the response at once instead of an
            # extra empty message once the upstream's end of message has been read.
            expected = None if head else _content_length(response.headers.raw)
            relayed = 0
            done = False
            # The raw stream, not aiter_raw(): a response a MockTransport built from bytes was
            # already read (and decoded) by httpx, yet its stream still yields the raw bytes.
            stream = response.stream
            assert isinstance(stream, httpx.AsyncByteStream)
            async for chunk in stream:
                if not chunk or done:
                    continue
                relayed += len(chunk)
                done = expected is not None and relayed >= expected
                if done:
                    exchange.finished = True
                await send({"type": "http.response.body", "body": chunk, "more_body": not done})
            if not done:
                exchange.finished = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await response.aclose()


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    message = await receive()
    if message["type"] != "http.request":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    parts = [body]
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any], exchange: _Exchange) -> None:
    """Cancel the relay when the client disconnects, even while the upstream has not answered."""
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            break
    if not exchange.finished:
        exchange.client_gone = True
        task.cancel()


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names listed in ``Connection:``; they are hop-by-hop too."""
    names: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            names.update(token.strip().lower() for token in value.split(b","))
    return frozenset(names)


def _response_headers(raw: list[tuple[bytes, bytes]], *, keep_length: bool) -> list[tuple[bytes, bytes]]:
    named = _connection_tokens(raw)
    kept = []
    for name, value in raw:
        low = name.lower()
        if (low in _RESPONSE_DROP and not (keep_length and low == b"content-length")) or low in named:
            continue
        kept.append((low, value))
    return kept


def _content_length(raw: list[tuple[bytes, bytes]]) -> int | None:
    length = None
    for name, value in raw:
        low = name.lower()
        if low == b"transfer-encoding":
            return None
        if low == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None
    return length


async def _send_scripted(send: Send, dialect: Dialect, body: bytes, text: str | ToolCall) -> None:
    request = dialects.read_request(dialect, body)
    scripted = dialects.script(dialect, text, request, now=time.time(), token=dialects.new_token())
    await send({"type": "http.response.start", "status": 200, "headers": list(scripted.headers)})
    last = len(scripted.chunks) - 1
    for index, chunk in enumerate(scripted.chunks):
        await send({"type": "http.response.body", "body": chunk, "more_body": index < last})


async def _send_error(send: Send, path: str, status: int, kind: str, message: str) -> None:
    body = dialects.error_body(message, kind, ollama=path.startswith("/api/"))
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-should-retry", b"false"),
        ],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})
