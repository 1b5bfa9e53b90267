"""Where the fast path sends a request, and the keep-alive connections it keeps there.

An ``Origin`` is fixed once: the model server of ``[model] upstream`` (scheme, host, port, base
path, its credentials as Basic auth, its TLS context with SNI), or the proxy's full path (the
ASGI app, on a loopback port of its own). A connection is an ``asyncio.Protocol`` that hands
every byte it reads to the exchange using it; idle connections wait in a LIFO stack per origin,
so a request takes the most recently idle one, which is the likeliest still open.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
from dataclasses import dataclass
from typing import NamedTuple, Protocol
from urllib.parse import urlsplit

from canary.config.tls import tls_context
from canary.config.urls import redact_url

__all__ = ["Connection", "Failure", "Origin", "Pool", "Receiver", "timed_out"]

#: Idle connections kept per origin; seconds one may stay idle (httpx's own expiry).
MAX_IDLE = 100
KEEPALIVE_EXPIRY = 5.0


@dataclass(frozen=True)
class Origin:
    """One place requests go: a host and port, how to speak to it, what to put in each request's head."""

    host: str
    port: int
    base_path: bytes = b""  # put before every target
    query: bytes = b""  # the origin's own query string (``?api-version=...``), put before the request's
    host_header: bytes | None = None  # None: the client's own Host goes along
    authorization: bytes | None = None  # sent when the client sends none
    tls: ssl.SSLContext | None = None
    server_hostname: str | None = None
    shown: str = ""  # the URL as messages show it (credentials hidden)

    @classmethod
    def of_url(cls, url: str, ca_file: str | None = None) -> Origin:
        """The origin of a base URL (``http://127.0.0.1:11434``, ``https://user:pw@host/base``)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{redact_url(url)} is not an http:// or https:// URL")
        https = parts.scheme == "https"
        port = parts.port or (443 if https else 80)
        host = parts.hostname
        shown_host = f"[{host}]" if ":" in host else host
        authority = shown_host if parts.port is None else f"{shown_host}:{port}"
        authorization = None
        if parts.username or parts.password:
            from urllib.parse import unquote

            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}".encode()
            authorization = b"Basic " + base64.b64encode(pair)
        return cls(
            host=host, port=port, base_path=parts.path.rstrip("/").encode("ascii"),
            query=parts.query.encode("ascii"),
            host_header=authority.encode("ascii"), authorization=authorization,
            tls=tls_context(ca_file) if https else None, server_hostname=host if https else None,
            shown=redact_url(url.rstrip("/")),
        )


def joined_target(origin: Origin, target: bytes) -> bytes:
    """A request's origin-form target as sent to ``origin``: after its base path, its query first."""
    if not origin.query:
        return origin.base_path + target
    path, mark, query = target.partition(b"?")
    return origin.base_path + path + b"?" + origin.query + (b"&" + query if mark and query else b"")


class Receiver(Protocol):
    """What a connection tells the exchange using it."""

    def upstream_data(self, data: bytes) -> None:
        """Bytes arrived."""
        ...

    def upstream_lost(self, exc: Exception | None) -> None:
        """The connection closed."""
        ...

    def upstream_paused(self, paused: bool) -> None:
        """The connection's write buffer is full (True) or drained again (False)."""
        ...


class Connection(asyncio.Protocol):
    """One connection to an origin; bytes read go to its ``receiver``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.receiver: Receiver | None = None
        self.closed = False
        self.reused = False  # has carried an exchange before this one
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        receiver = self.receiver
        if receiver is not None:
            receiver.upstream_data(data)
        else:
            self.close()  # bytes nobody asked for: the connection cannot be trusted for another request

    def eof_received(self) -> bool | None:
        return None  # close

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        receiver, self.receiver = self.receiver, None
        if receiver is not None:
            receiver.upstream_lost(exc)

    def pause_writing(self) -> None:
        if self.receiver is not None:
            self.receiver.upstream_paused(True)

    def resume_writing(self) -> None:
        if self.receiver is not None:
            self.receiver.upstream_paused(False)

    def write(self, data: bytes | bytearray) -> None:
        """Send bytes, if the connection is open."""
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        """Close at once (an exchange cut short leaves the connection unusable)."""
        self.closed = True
        self.receiver = None
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """Idle keep-alive connections per origin, most recently idle first."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, max_idle: int = MAX_IDLE,
                 expiry: float = KEEPALIVE_EXPIRY) -> None:
        self._loop = loop
        self._idle: dict[Origin, list[Connection]] = {}
        self.max_idle = max_idle
        self.expiry = expiry
        self.closed = False

    def idle(self, origin: Origin) -> Connection | None:
        """An idle open connection to ``origin``, or None."""
        stack = self._idle.get(origin)
        now = self._loop.time()
        while stack:
            connection = stack.pop()
            if not connection.closed and now - connection.idle_since < self.expiry:
                connection.reused = True
                return connection
            connection.close()
        return None

    async def connect(self, origin: Origin, timeout: float) -> Connection:
        """A new connection to ``origin`` (TLS with SNI for an https one)."""
        _, connection = await asyncio.wait_for(
            self._loop.create_connection(
                Connection, origin.host, origin.port, ssl=origin.tls, server_hostname=origin.server_hostname,
            ),
            timeout,
        )
        transport = connection.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    def release(self, origin: Origin, connection: Connection) -> None:
        """Put a connection whose exchange ended cleanly back for the next request."""
        connection.receiver = None
        stack = self._idle.setdefault(origin, [])
        if self.closed or connection.closed or len(stack) >= self.max_idle:
            connection.close()
            return
        connection.idle_since = self._loop.time()
        if connection.transport is not None:
            connection.transport.resume_reading()  # a slow client may have paused it; the next must read
        stack.append(connection)

    def close(self) -> None:
        """Close every idle connection; those in use close when their exchange ends."""
        self.closed = True
        stacks, self._idle = self._idle, {}
        for stack in stacks.values():
            for connection in stack:
                connection.close()


def certificate_refused(exc: BaseException) -> str | None:
    """Why the upstream's certificate was refused, when that is what failed the connection."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or "certificate verify failed"
        if "CERTIFICATE_VERIFY_FAILED" in str(seen):  # wrapped in text only (httpx's ConnectError)
            detail = str(seen).rpartition("certificate verify failed: ")[2]
            return _SSL_SOURCE.sub("", detail) or "certificate verify failed"
        seen = seen.__cause__ or seen.__context__
    return None


_SSL_SOURCE = re.compile(r"\s*\(_ssl\.c:\d+\)\)*$")  # "... (_ssl.c:1006)", and the bracket around it


class Failure(NamedTuple):
    """How an origin failed a request: the recorder's outcome and predicate, and the answer to send."""

    outcome: str  # one of ``canary.proxy.health.FAILURES``
    predicate: str  # follows "the model server"
    status: int
    kind: str
    message: str


def timed_out(origin: Origin | None, phase: str) -> Failure:
    """The failure of an origin that did not answer in time."""
    shown = origin.shown if origin is not None else ""
    return Failure("timeout", f"did not answer in time ({phase} timeout)", 504, "upstream_timeout",
                   f"the model server at {shown} did not answer in time ({phase} timeout)")
