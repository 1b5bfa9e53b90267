"""One request through the fast path: its body read (or streamed), and its answer relayed back.

The exchange is the request parser's and the upstream connection's callback object at once:
the client's body goes upstream with the framing it came with (or, buffered, with its exact
length); the answer's head is rewritten (``canary.proxy.wire``) and its body relayed as it
arrives, a body of unknown length chunked. Nothing builds a request or response object.

A reused keep-alive connection the upstream closed just before the request was written is
retried once on a new one when the request is whole in memory; after the answer has started,
a broken upstream closes the client's connection, so the client never takes a cut answer for
a whole one. A client that goes away closes the upstream connection at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import httptools

from canary.config.tls import certificate_predicate
from canary.proxy import wire
from canary.proxy.upstream import Connection, Failure, Origin, certificate_refused, joined_target, timed_out

if TYPE_CHECKING:
    from canary.proxy.front import Front, FrontProtocol

__all__ = ["Exchange", "Failure"]


_NO_BODY_STATUS = frozenset({204, 304})
#: Bytes of a streamed body held while the upstream connection is made, before the client is paused.
_PENDING_LIMIT = 1 << 20
#: A buffered body up to this size goes out in the same write as its head.
_ONE_WRITE = 64 * 1024


class Exchange:
    """One request and its answer."""

    __slots__ = (
        "active", "body", "body_done", "body_since", "buffered", "checked", "chunk_out", "chunked_in",
        "close_after", "conn", "connecting", "early", "expect", "finished", "front", "head_done", "head_only",
        "headers", "http10", "ignoring", "keep_alive", "length", "method", "origin", "out", "parser", "path",
        "pending", "pending_size", "proto", "read_timer", "reason", "received", "reply_headers", "sent_head",
        "started", "taken", "traceparent", "upstream_keep", "url",
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

    def _stop_read_timer(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

    def give_back(self) -> None:
        """Return the body's share of the in-flight budget."""
        if self.taken:
            self.front.budget.give(self.taken)
            self.taken = 0
        self.body = bytearray()

    # -- going upstream ------------------------------------------------------------------

    def go(self, origin: Origin) -> None:
        """Send the request to ``origin`` on an idle connection, or on a new one."""
        self.origin = origin
        conn = self.front.pool.idle(origin)
        if conn is not None:
            self._attach(conn)
        else:
            self.connecting = self.front.loop.create_task(self._connect(origin))

    async def _connect(self, origin: Origin) -> None:
        try:
            conn = await self.front.pool.connect(origin, self.front.connect_timeout)
        except asyncio.CancelledError:
            raise
        except TimeoutError:
            self.front.unreachable(self, origin, timed_out(origin, "connect"))
            return
        except OSError as exc:
            self._connect_failed(origin, exc)
            return
        finally:
            self.connecting = None
        if self.finished:
            conn.close()
            return
        self._attach(conn)

    def _connect_failed(self, origin: Origin, exc: OSError) -> None:
        refused = certificate_refused(exc)
        if refused is not None:
            self.front.unreachable(self, origin, Failure(
                "refused", certificate_predicate(refused), 502,
                "upstream_certificate",
                f"the model server at {origin.shown} presented a TLS certificate the proxy refused "
                f"({refused}): "
                "check the host in [model] upstream, or add the CA that signed it with [model] ca_file in "
                "canary.toml"))
            return
        from canary.proxy.relay import connect_failure

        reason = exc.strerror or str(exc) or "connection failed"
        self.front.unreachable(self, origin, Failure(
            "refused", connect_failure(exc), 502, "upstream_unavailable",
            f"the model server at {origin.shown} is not reachable: {reason}"))

    def _attach(self, conn: Connection) -> None:
        origin = self.origin
        assert origin is not None
        self.conn = conn
        conn.receiver = self
        self.parser = httptools.HttpResponseParser(self)
        self.started = time.perf_counter()
        if self.front.read_timeout is not None:
            self._arm_read()
        if self.buffered:
            body = self.body
            had_body = bool(body) or self.length is not None or self.chunked_in
            framing = b"content-length: %d\r\n" % len(body) if had_body else b""
            head = self._head(origin, framing)
            if len(body) <= _ONE_WRITE:
                conn.write(head + body)  # one write, one wakeup of the upstream
            else:
                conn.write(head)
                conn.write(body)  # no copy of a large body beside the one held
            return
        if self.chunked_in:
            framing = b"transfer-encoding: chunked\r\n"
        elif self.length is not None:
            framing = b"content-length: " + self.length + b"\r\n"
        else:
            framing = b""
        pending, self.pending, self.pending_size = self.pending, [], 0
        conn.write(b"".join([self._head(origin, framing), *pending]))
        self.proto.resume_client()

    def _head(self, origin: Origin, framing: bytes) -> bytes:
        return wire.request_head(self.method, joined_target(origin, self.url), self.headers,
                                 host=origin.host_header, framing=framing, authorization=origin.authorization)

    def _send_upstream(self, data: bytes) -> None:
        conn = self.conn
        if conn is not None:
            conn.write(data)
            return
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size > _PENDING_LIMIT:
            self.proto.pause_client()

    # -- the answer ----------------------------------------------------------------------

    def _arm_read(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
        timeout = self.front.read_timeout
        assert timeout is not None
        self.read_timer = self.front.loop.call_later(timeout, self._read_late)

    def _read_late(self) -> None:
        self.read_timer = None
        if self.finished or self.conn is None:
            return
        if self.sent_head:
            self.abort()
            return
        conn, self.conn = self.conn, None
        conn.close()
        self.front.unreachable(self, self.origin, timed_out(self.origin, "read"))

    def upstream_data(self, data: bytes) -> None:
        parser = self.parser
        assert parser is not None
        if self.read_timer is not None:
            self._arm_read()
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            self._broken()
            return
        if self.out:
            self.flush()

    def flush(self) -> None:
        out, self.out = self.out, []
        self.proto.write(b"".join(out) if len(out) > 1 else out[0])

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.reply_headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None
        status = parser.get_status_code()
        if status < 200:
            self.reply_headers, self.reason = [], b""  # an interim answer; the final one follows
            return
        self.upstream_keep = parser.should_keep_alive()
        self.head_only = self.method == b"HEAD" or status in _NO_BODY_STATUS
        length = any(name.lower() == b"content-length" for name, _ in self.reply_headers)
        self.chunk_out = not self.head_only and not length and not self.http10
        self.close_after = not self.keep_alive or self.front.draining or (self.http10 and not length)
        self.out.append(wire.response_head(status, self.reason, self.reply_headers, keep_length=length,
                                           chunked=self.chunk_out, close=self.close_after))
        self.sent_head = True
        self.front.answered(self, status, time.perf_counter() - self.started)
        if self.head_only:
            self._complete()

    def on_body(self, data: bytes) -> None:
        if not self.finished:
            self.out.append(wire.chunk(data) if self.chunk_out else data)

    def on_message_complete(self) -> None:
        if self.sent_head and not self.finished:
            self._complete()

    def _complete(self) -> None:
        if self.chunk_out:
            self.out.append(wire.LAST_CHUNK)
        conn, self.conn = self.conn, None
        if conn is not None and self.origin is not None:
            if self.upstream_keep and self.body_done:
                self.front.pool.release(self.origin, conn)
            else:
                conn.close()
        self.finished = True
        self._stop_read_timer()
        if self.out:
            self.flush()
        self.give_back()
        self.proto.exchange_done(self)

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.finished:
            return
        self.conn = None
        if self.sent_head:
            framed = any(n.lower() in (b"transfer-encoding", b"content-length")
                         for n, _ in self.reply_headers)
            if not framed and not self.head_only:
                self._complete()  # the upstream's body ends where its connection does
            else:
                self.abort()
            return
        self._broken()

    def upstream_paused(self, paused: bool) -> None:
        if paused:
            self.proto.pause_client()
        else:
            self.proto.resume_client()

    def _broken(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            retry = conn.reused and not self.sent_head and self.parser is not None and self.buffered
            conn.close()
            if retry and self.origin is not None and not self.reply_headers:
                self.connecting = self.front.loop.create_task(self._connect(self.origin))
                return
        if self.sent_head:
            self.abort()
            return
        shown = self.origin.shown if self.origin is not None else ""
        self.front.unreachable(self, self.origin, Failure(
            "broken", "broke off the exchange", 502, "upstream_error",
            f"the model server at {shown} broke off the exchange"))

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
