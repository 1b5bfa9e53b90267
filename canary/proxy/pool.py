"""The proxy's upstream transport: HTTP/1.1 keep-alive connections kept in a LIFO stack.

httpcore's own pool walks every pooled connection on each request and, with requests queued
at once, may hand one idle connection to two of them; the loser retries the whole walk. Under
50 concurrent calls that was most of the proxy's time. Here a request takes the most recently
idle connection off the stack, so it is its alone, checks only that one is still usable,
and puts it back when its response is closed, if the connection can be reused.

A request's head is held back until its first body bytes (or its first read), so a small
model call reaches the upstream in one write instead of two: on loopback each write is a
wakeup of the upstream.

An https upstream is verified against the system's CAs (certifi's where the system offers
none), plus the PEM file ``ca_file`` names; the host name goes out as SNI and is checked
against the certificate; connections are kept alive as over plain HTTP.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from canary.config.tls import tls_context

__all__ = ["UpstreamTransport"]

_NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


@contextmanager
def _mapped(request: httpx.Request) -> Iterator[None]:
    """httpcore's exceptions as the httpx ones of the same name (``ReadTimeout``, ``ConnectError``...)."""
    try:
        yield
    except httpcore.UnsupportedProtocol as exc:
        raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
    except Exception as exc:
        if not type(exc).__module__.startswith("httpcore"):
            raise
        for kind in type(exc).__mro__:
            mapped = getattr(httpx, kind.__name__, None)
            if isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
                raise mapped(str(exc), request=request) from exc
        raise httpx.TransportError(str(exc), request=request) from exc


def _key(origin: httpcore.Origin) -> tuple[bytes, bytes, int]:
    return (origin.scheme, origin.host, origin.port)


class _HeadWithBody(httpcore.AsyncNetworkStream):
    """A stream that sends each request head together with the write that follows it."""

    def __init__(self, stream: httpcore.AsyncNetworkStream) -> None:
        self._stream = stream
        self._head = True  # the next write starts a request
        self._held = b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self._head:
            self._head = False
            self._held = buffer
            return
        if self._held:
            buffer, self._held = self._held + buffer, b""
        if buffer:
            await self._stream.write(buffer, timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            held, self._held = self._held, b""
            await self._stream.write(held, timeout)
        self._head = True
        return await self._stream.read(max_bytes, timeout)

    async def aclose(self) -> None:
        self._held = b""
        await self._stream.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        return _HeadWithBody(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.AsyncNetworkBackend):
    """httpcore's anyio backend, its TCP streams wrapped in :class:`_HeadWithBody`."""

    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _HeadWithBody(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class UpstreamTransport(httpx.AsyncBaseTransport):
    """An httpx transport over a LIFO stack of keep-alive HTTP/1.1 connections per origin."""

    def __init__(self, *, max_idle: int = 100, keepalive_expiry: float = 5.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self.max_idle = max_idle
        self.keepalive_expiry = keepalive_expiry
        self._idle: dict[tuple[bytes, bytes, int], list[httpcore.AsyncHTTPConnection]] = {}
        self._closed = False
        self._backend = _Backend()

    async def _acquire(self, origin: httpcore.Origin) -> httpcore.AsyncHTTPConnection:
        stack = self._idle.get(_key(origin))
        while stack:
            connection = stack.pop()
            if connection.is_idle() and not connection.has_expired():
                return connection
            await connection.aclose()
        if origin.scheme == b"https" and self._ssl_context is None:
            self._ssl_context = tls_context()  # made on first use: loading the CAs takes a while
        return httpcore.AsyncHTTPConnection(origin, ssl_context=self._ssl_context,
                                            keepalive_expiry=self.keepalive_expiry,
                                            network_backend=self._backend, socket_options=_NODELAY)

    async def _release(self, origin: httpcore.Origin, connection: httpcore.AsyncHTTPConnection) -> None:
        stack = self._idle.setdefault(_key(origin), [])
        if not self._closed and connection.is_idle() and len(stack) < self.max_idle:
            stack.append(connection)
        else:
            await connection.aclose()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` on a connection of its own; the connection returns when the response closes."""
        url = request.url
        default_port = 443 if url.scheme == "https" else 80
        origin = httpcore.Origin(url.raw_scheme, url.raw_host, url.port or default_port)
        stream = request.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
            headers=request.headers.raw,
            content=stream,
            extensions=request.extensions,
        )
        connection = await self._acquire(origin)
        try:
            with _mapped(request):
                response = await connection.handle_async_request(core_request)
        except BaseException:
            await connection.aclose()
            raise
        body = _ResponseStream(response.stream, request, lambda: self._release(origin, connection),
                               connection)
        return httpx.Response(status_code=response.status, headers=response.headers, stream=body,
                              extensions=response.extensions)

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when their response does."""
        self._closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for connection in stack:
                await connection.aclose()


class _ResponseStream(httpx.AsyncByteStream):
    """The upstream body; closing it hands the connection back (or closes it if it cannot be reused)."""

    def __init__(self, stream: Any, request: httpx.Request, release: Any,
                 connection: httpcore.AsyncHTTPConnection) -> None:
        self._stream = stream
        self._request = request
        self._release = release
        self._connection = connection
        self._done = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped(self._request):
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            with _mapped(self._request):
                await self._stream.aclose()
        except BaseException:
            await self._connection.aclose()
            raise
        await self._release()
