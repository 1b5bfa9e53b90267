"""Passthrough: one request relayed to the upstream model server and its answer relayed back.

The upstream URL is the configured origin (scheme, host, port and base path, fixed once) with
the request's origin-form target appended, so no request can change where it goes. A
buffered body (a model call) goes with an exact Content-Length; any other body is streamed
as it arrives, with the client's own framing. The response is relayed raw as it arrives,
with its status, its reason phrase, its headers (less hop-by-hop ones) and its
Content-Encoding; a Content-Length is kept, since the bytes are relayed unchanged.
A client that goes away cancels the upstream exchange at once, before or after the first byte.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import httpx
from starlette.types import Message, Receive, Scope, Send

from canary.config.tls import certificate_predicate
from canary.config.urls import redact_url
from canary.proxy import dialects
from canary.proxy.health import Recorder
from canary.proxy.upstream import certificate_refused

__all__ = ["Relay", "connect_failure", "send_error"]

# RFC 7230 §6.1 hop-by-hop headers, plus the framing headers the proxy recomputes.
_HOP_BY_HOP = frozenset({
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate", b"proxy-authorization",
    b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade",
})
# ``expect`` too: the server in front has already answered any 100-continue.
_REQUEST_DROP = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
_RESPONSE_DROP = _HOP_BY_HOP | {b"content-length"}
_NO_BODY_STATUS = frozenset({204, 304})
_TIMEOUT_PHASES: dict[type[Exception], str] = {
    httpx.ConnectTimeout: "connect", httpx.ReadTimeout: "read",
    httpx.WriteTimeout: "write", httpx.PoolTimeout: "pool",
}


log = logging.getLogger(__name__)


class ClientGone(Exception):
    """The client disconnected while its request body was being streamed upstream."""


class _Exchange:
    """What the disconnect watcher and the relay share about one passthrough."""

    __slots__ = ("client_gone", "finished")

    def __init__(self) -> None:
        self.client_gone = False
        self.finished = False


class Relay:
    """Relays requests to one upstream origin with one httpx client."""

    def __init__(
        self, upstream: str, client: httpx.AsyncClient, timeout: httpx.Timeout,
        transport: httpx.AsyncBaseTransport | None = None, *, recorder: Recorder | None = None,
    ) -> None:
        self.recorder = recorder
        url = httpx.URL(upstream)
        self.shown = redact_url(upstream.rstrip("/"))
        origin = url.copy_with(username=None, password=None, raw_path=b"", query=None, fragment=None)
        # Scheme and authority, fixed: a target appended after them starts with "/", which ends
        # the authority, so no request can change where it goes.
        self.origin = str(origin).rstrip("/")
        self.base_path = url.raw_path.partition(b"?")[0].rstrip(b"/").decode("ascii")
        # The upstream's own query string (``?api-version=...``, ``?key=...``) goes before the request's.
        self.query = url.query.decode("ascii")
        self.authorization: bytes | None = None
        if url.username or url.password:
            pair = f"{url.username}:{url.password}".encode()
            self.authorization = b"Basic " + base64.b64encode(pair)
        self.client = client
        # The transport the proxy made itself is called directly: the client's layers (auth,
        # redirects, cookies, event hooks) have nothing to do for a relay and cost a third of it.
        self.transport = transport
        self.extensions: dict[str, Any] = {"timeout": timeout.as_dict()}

    def url(self, target: bytes) -> httpx.URL:
        """The upstream URL of an origin-form request target (``/path?query``)."""
        if not target.startswith(b"/"):
            raise httpx.InvalidURL("the request target is not a path")
        text = target.decode("latin-1")
        if self.query:
            path, mark, query = text.partition("?")
            text = f"{path}?{self.query}" + (f"&{query}" if mark and query else "")
        return httpx.URL(self.origin + self.base_path + text)

    def request(
        self, scope: Scope, url: httpx.URL, body: bytes | AsyncIterator[bytes] | None
    ) -> httpx.Request:
        """The upstream request: the client's headers less hop-by-hop ones, and its body."""
        headers: list[tuple[bytes, bytes]] = []
        length: bytes | None = None
        chunked = False
        authorized = False
        request_headers: list[tuple[bytes, bytes]] = scope["headers"]
        named = _connection_tokens(request_headers)
        for name, value in request_headers:
            low = name.lower()
            if low == b"content-length":
                length = value
            elif low == b"transfer-encoding":
                chunked = True
            elif low == b"authorization":
                authorized = True
            if low in _REQUEST_DROP or low in named:
                continue
            headers.append((name, value))
        if self.authorization is not None and not authorized:
            headers.append((b"authorization", self.authorization))
        if chunked:
            length = None  # RFC 9112 §6.3: with chunked framing, a Content-Length is to be ignored
        had_body = length is not None or chunked
        content: bytes | AsyncIterator[bytes] | None
        if isinstance(body, bytes):
            if had_body and not body:
                headers.append((b"content-length", b"0"))  # httpx leaves it out for an empty body
            content = body if body or had_body else None
        elif body is not None and had_body:
            # Streamed with the client's own framing: its exact length, or chunks.
            if length is not None:
                headers.append((b"content-length", length))
            else:
                headers.append((b"transfer-encoding", b"chunked"))
            content = body
        else:
            content = None
        return httpx.Request(scope["method"], url, headers=headers, content=content,
                             extensions=self.extensions)

    async def relay(
        self, scope: Scope, receive: Receive, send: Send, url: httpx.URL, body: bytes | None
    ) -> None:
        """Relay one exchange; ``body`` None streams the request body from ``receive``."""
        task = asyncio.current_task()
        assert task is not None
        exchange = _Exchange()
        loop = asyncio.get_running_loop()
        watcher: asyncio.Task[None] | None = None

        def watch() -> None:
            nonlocal watcher
            watcher = loop.create_task(_watch_disconnect(receive, task, exchange))

        if body is None:
            request = self.request(scope, url, _stream_body(receive, watch))
        else:
            request = self.request(scope, url, body)
            watch()
        try:
            await self._exchange(request, scope, send, exchange)
        except asyncio.CancelledError:
            if exchange.client_gone and task.uncancel() == 0:
                return  # our own cancellation: the client went away
            raise
        except ClientGone:
            return
        except OSError:
            # httpx wraps its own socket errors, so this came from ``send``: ASGI 2.4 servers
            # raise it when the client has gone, before any http.disconnect reaches the watcher.
            return
        finally:
            exchange.finished = True
            if watcher is not None:
                watcher.cancel()

    async def _exchange(self, request: httpx.Request, scope: Scope, send: Send, exchange: _Exchange) -> None:
        path: str = scope["path"]
        started = time.perf_counter()
        try:
            if self.transport is not None:
                response = await self.transport.handle_async_request(request)
            else:
                response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            phase = _TIMEOUT_PHASES.get(type(exc), "request")
            self._failed("timeout", f"did not answer in time ({phase} timeout)", request)
            await send_error(send, path, 504, "upstream_timeout",
                             f"the model server at {self.shown} did not answer in time ({phase} timeout)")
            return
        except httpx.ConnectError as exc:
            refused = certificate_refused(exc)
            if refused is not None:
                self._failed("refused", certificate_predicate(refused), request)
                await send_error(send, path, 502, "upstream_certificate",
                                 f"the model server at {self.shown} presented a TLS certificate the proxy "
                                 f"refused ({refused}): check the host in [model] upstream, or add the CA "
                                 "that signed it with [model] ca_file in canary.toml")
                return
            self._failed("refused", connect_failure(exc), request)
            await send_error(send, path, 502, "upstream_unavailable",
                             f"the model server at {self.shown} is not reachable: "
                             f"{redact_url(str(exc)) or 'connection failed'}")
            return
        except httpx.TransportError as exc:
            self._failed("broken", "broke off the exchange", request)
            await send_error(send, path, 502, "upstream_error",
                             f"the model server at {self.shown} broke off the exchange: "
                             f"{redact_url(str(exc)) or type(exc).__name__}")
            return
        if self.recorder is not None:
            self.recorder.answered(response.status_code, time.perf_counter() - started)
        try:
            await _relay_response(response, scope, send, exchange)
        finally:
            await response.aclose()

    def _failed(self, outcome: str, predicate: str, request: httpx.Request) -> None:
        """Tell the recorder the model server failed a request (``predicate`` follows "the model server")."""
        if self.recorder is None:
            return
        try:
            body = request.content  # a model call's body is buffered; a streamed one is not read again
        except httpx.RequestNotRead:
            body = b""
        try:
            self.recorder.failed(outcome, predicate, body)
        except Exception:
            log.exception("the proxy's recorder failed; the agent's request is answered anyway")


def connect_failure(exc: BaseException) -> str:
    """What a failed connection to the model server was, after "the model server at URL"."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "refused" in str(seen).lower():
            return "refused the connection"
        seen = seen.__cause__ or seen.__context__
    return f"could not be reached ({exc or type(exc).__name__})"


async def _relay_response(response: httpx.Response, scope: Scope, send: Send, exchange: _Exchange) -> None:
    head = scope["method"] == "HEAD" or response.status_code in _NO_BODY_STATUS
    raw = response.headers.raw
    length = _content_length(raw)
    start: dict[str, Any] = {
        "type": "http.response.start",
        "status": response.status_code,
        "headers": _response_headers(raw, keep_length=head or length is not None),
    }
    reason = response.extensions.get("reason_phrase")
    if isinstance(reason, bytes) and reason:
        start["reason"] = reason
    await send(start)
    # With a known length, the last piece closes the response at once instead of an
    # extra empty message once the upstream's end of message has been read.
    expected = None if head else length
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


async def _stream_body(receive: Receive, on_complete: Any) -> AsyncIterator[bytes]:
    """The request body as it arrives; ``on_complete()`` once the client has sent all of it."""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            on_complete()
            return


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


async def send_error(
    send: Send, path: str, status: int, kind: str, message: str, *, close: bool = False
) -> None:
    """An error answer in the dialect the path speaks (OpenAI style where it speaks none)."""
    body = dialects.error_body(path, status, kind, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-should-retry", b"false"),
    ]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
