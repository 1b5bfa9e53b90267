"""One request through the fast path: its body read (or streamed), and its answer relayed back.

The exchange is the request parser's and the upstream connection's callback object at once:
the client's body goes upstream with the framing it came with (or, buffered, with its exact
length); the answer's head is rewritten (``canary.proxy.wire``) and its body relayed as it
arrives, a body of unknown length chunked. Nothing builds a request or response object.

The client's side is here; the upstream's (the connection, the request written, the answer
relayed) is ``canary.proxy.upstreamside``. A client that goes away closes the upstream
connection at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httptools

from canary.proxy import wire
from canary.proxy.upstream import Connection, Failure, Origin
from canary.proxy.upstreamside import UpstreamSide

if TYPE_CHECKING:
    from canary.proxy.front import Front
    from canary.proxy.frontconn import FrontProtocol

__all__ = ["Exchange", "Failure"]


class Exchange(UpstreamSide):
    """One request and its answer."""

    # Beside those of ``UpstreamSide``.
    __slots__ = (
        "active", "body", "body_done", "body_since", "buffered", "checked", "chunked_in", "early", "expect",
        "front", "head_done", "headers", "http10", "ignoring", "keep_alive", "length", "method", "path",
        "proto", "received", "taken", "traceparent", "url",
    )

    def __init__(self, proto: FrontProtocol) -> None:
        self.proto = proto
        self.front: Front = proto.front
        self.active = False  # pipelined requests wait their turn
        self.early: list[bytes] = []  # body bytes that came before the exchange was active
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method = b""
        self.path = ""
        self.keep_alive = True
        self.http10 = False  # an HTTP/1.0 client reads no chunks: an unknown length ends with the close
        self.head_done = False
        self.body_done = False
        self.buffered = False
        self.body = bytearray()
        self.taken = 0  # bytes of the in-flight budget this body holds
        self.received = 0
        self.checked = 0  # ``received`` at the last look of the body deadline
        self.length: bytes | None = None
        self.chunked_in = False
        self.expect = False
        self.traceparent: bytes | None = None
        self.ignoring = False  # answered already; the rest of the body is dropped
        self.finished = False
        self.origin: Origin | None = None
        self.conn: Connection | None = None
        self.pending: list[bytes] = []
        self.pending_size = 0
        self.connecting: asyncio.Task[None] | None = None
        self.body_since: float | None = None  # the loop's time of the last look at a body still arriving
        self.read_timer: asyncio.TimerHandle | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self.started = 0.0
        self.sent_head = False
        self.reply_headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.out: list[bytes] = []
        self.chunk_out = False
        self.upstream_keep = False
        self.close_after = False
        self.head_only = False

    # -- the request ------------------------------------------------------------------

    def target(self) -> bytes:
        return self.url

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def request_body(self, data: bytes) -> None:
        """Body bytes from the client (already de-chunked)."""
        if not self.active:
            self.early.append(data)
            return
        if self.ignoring or self.finished:
            return
        self.received += len(data)
        if self.buffered:
            if self.received > self.front.max_body:
                self.refuse(413, "request_too_large",
                            "the request body is larger than the canary proxy's limit of "
                            f"{self.front.max_body} bytes ([model] max_body in canary.toml)")
                return
            if not self.front.budget.take(len(data)):
                self.refuse(503, "proxy_busy",
                            "the canary proxy holds too many unfinished request bodies; try again",
                            retry_after=1)
                return
            self.taken += len(data)
            self.body += data
            return
        self._send_upstream(wire.chunk(data) if self.chunked_in else data)

    def request_end(self) -> None:
        """The client has sent the whole request."""
        if not self.active:
            self.early.append(b"")
            return
        self.body_done = True
        self._stop_timer()
        if self.ignoring or self.finished:
            return
        if self.buffered:
            self.front.dispatch(self)
        elif self.chunked_in:
            self._send_upstream(wire.LAST_CHUNK)

    def activate(self) -> None:
        """Its turn: start it, and replay what arrived meanwhile."""
        self.active = True
        self.front.begin(self)
        early, self.early = self.early, []
        for data in early:
            if data:
                self.request_body(data)
            else:
                self.request_end()

    def watch_body(self) -> None:
        """Give up on a body that trickles in slower than the front allows (the front's sweep looks)."""
        if not self.body_done:
            self.body_since = self.front.loop.time()
            self.checked = self.received

    def body_late(self, now: float) -> None:
        """A sweep's look at a body still arriving: cut it if it grew too little since the last look."""
        since = self.body_since
        if since is None or self.body_done or self.finished or now - since < self.front.body_period:
            return
        if self.received - self.checked >= self.front.body_min:
            self.body_since = now
            self.checked = self.received
            return
        self.body_since = None
        if self.sent_head or self.conn is not None:
            self.abort()
            return
        self.refuse(408, "request_timeout", "the request body arrived too slowly")

    def _stop_timer(self) -> None:
        self.body_since = None

    def give_back(self) -> None:
        """Return the body's share of the in-flight budget."""
        if self.taken:
            self.front.budget.give(self.taken)
            self.taken = 0
        self.body = bytearray()

    # -- ending ---------------------------------------------------------------------------

    def refuse(self, status: int, kind: str, message: str, *, retry_after: int | None = None,
               client_retries: bool = False) -> None:
        """Answer the proxy's own error and close the connection once it is written."""
        self.ignoring = True
        if self.sent_head:
            self.abort()
            return
        self.keep_alive = False
        self.answer_raw(wire.error_response(self.path, status, kind, message, close=True,
                                            retry_after=retry_after, client_retries=client_retries))

    def answer_error(self, status: int, kind: str, message: str, *, client_retries: bool = False) -> None:
        """Answer the proxy's own error; the connection stays open when the request was read whole.

        ``client_retries``: the SDK's own policy decides whether to retry (``wire.error_response``)."""
        if not self.body_done:
            self.refuse(status, kind, message, client_retries=client_retries)
            return
        close = not self.keep_alive or self.front.draining
        self.answer_raw(wire.error_response(self.path, status, kind, message, close=close,
                                            client_retries=client_retries))

    def answer_raw(self, response: bytes) -> None:
        """Answer with these bytes (a whole response) instead of relaying the request."""
        self.ignoring = True
        self.close_after = not self.keep_alive or self.front.draining
        self._stop_timer()
        self.proto.write(response)
        self.finished = True
        self.give_back()
        self.proto.exchange_done(self)

    def abort(self) -> None:
        """Cut both sides: the client must not take a cut answer for a whole one."""
        self.finished = True
        self.cancel()
        self.proto.abort()

    def cancel(self) -> None:
        """The client went away: close the upstream side and let go of everything."""
        self.finished = True
        self._stop_timer()
        self._stop_read_timer()
        self.give_back()
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
        if self.connecting is not None:
            self.connecting.cancel()
            self.connecting = None
