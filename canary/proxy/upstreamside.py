"""The upstream side of an exchange (``canary.proxy.exchange``): the connection, the request
written to it, and the answer relayed back as it arrives.

A reused keep-alive connection the upstream closed just before the request was written is
retried once on a new one when the request is whole in memory; after the answer has started,
a broken upstream closes the client's connection, so the client never takes a cut answer for
a whole one. A model server that cannot be reached, refuses the proxy's TLS handshake, is
late or breaks off the exchange before answering is answered by the front
(``Front.unreachable``).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

import httptools

from canary.config.tls import certificate_predicate
from canary.proxy import wire
from canary.proxy.upstream import Connection, Failure, Origin, certificate_refused, joined_target, timed_out

if TYPE_CHECKING:
    from canary.proxy.exchange import Exchange
    from canary.proxy.front import Front
    from canary.proxy.frontconn import FrontProtocol

_NO_BODY_STATUS = frozenset({204, 304})
#: Bytes of a streamed body held while the upstream connection is made, before the client is paused.
_PENDING_LIMIT = 1 << 20
#: A buffered body up to this size goes out in the same write as its head.
_ONE_WRITE = 64 * 1024


class UpstreamSide:
    """What an exchange does with the model server; ``Exchange`` holds its state and its client side."""

    # What the upstream side sets; the rest of the exchange's state is ``Exchange``'s.
    __slots__ = (
        "chunk_out", "close_after", "conn", "connecting", "finished", "head_only", "origin", "out", "parser",
        "pending", "pending_size", "read_timer", "reason", "reply_headers", "sent_head", "started",
        "upstream_keep",
    )

    origin: Origin | None
    conn: Connection | None
    connecting: asyncio.Task[None] | None
    pending: list[bytes]
    pending_size: int
    read_timer: asyncio.TimerHandle | None
    parser: httptools.HttpResponseParser | None
    started: float
    sent_head: bool
    reply_headers: list[tuple[bytes, bytes]]
    reason: bytes
    out: list[bytes]
    chunk_out: bool
    upstream_keep: bool
    close_after: bool
    head_only: bool
    finished: bool

    if TYPE_CHECKING:
        proto: FrontProtocol
        front: Front
        url: bytes
        method: bytes
        headers: list[tuple[bytes, bytes]]
        keep_alive: bool
        http10: bool
        body: bytearray
        body_done: bool
        buffered: bool
        length: bytes | None
        chunked_in: bool

        def abort(self) -> None: ...
        def give_back(self) -> None: ...

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
            self.front.unreachable(cast("Exchange", self), origin, timed_out(origin, "connect"))
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
            self.front.unreachable(cast("Exchange", self), origin, Failure(
                "refused", certificate_predicate(refused), 502,
                "upstream_certificate",
                f"the model server at {origin.shown} presented a TLS certificate the proxy refused "
                f"({refused}): "
                "check the host in [model] upstream, or add the CA that signed it with [model] ca_file in "
                "canary.toml"))
            return
        from canary.proxy.relay import connect_failure

        reason = exc.strerror or str(exc) or "connection failed"
        self.front.unreachable(cast("Exchange", self), origin, Failure(
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

    def _stop_read_timer(self) -> None:
        if self.read_timer is not None:
            self.read_timer.cancel()
            self.read_timer = None

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
        self.front.unreachable(cast("Exchange", self), self.origin, timed_out(self.origin, "read"))

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
        self.front.answered(cast("Exchange", self), status, time.perf_counter() - self.started)
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
        self.proto.exchange_done(cast("Exchange", self))

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
        self.front.unreachable(cast("Exchange", self), self.origin, Failure(
            "broken", "broke off the exchange", 502, "upstream_error",
            f"the model server at {shown} broke off the exchange"))
