"""One client connection of the proxy's front (``canary.proxy.front``): its requests parsed in turn
by a C parser (``httptools``), each an ``Exchange``, pipelined requests waiting their turn.

At the front's sweep, a request head that is late closes the connection and a body that trickles
in is cut; a request the parser refuses is answered 400 (its answer not begun yet) and the
connection is closed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

import httptools

from canary.proxy import wire
from canary.proxy.exchange import Exchange

if TYPE_CHECKING:
    from canary.proxy.front import Front


class FrontProtocol(asyncio.Protocol):
    """One client connection: requests parsed in turn, each an :class:`Exchange`."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.exchanges: deque[Exchange] = deque()
        self.current: Exchange | None = None
        self.head_since: float | None = None  # the loop's time since which a request head is due
        self.last_active = 0.0
        self.paused = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.front.connections.add(self)
        self.last_active = self.front.loop.time()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.front.connections.discard(self)
        self._disarm()
        exchanges, self.exchanges = self.exchanges, deque()
        for ex in exchanges:
            ex.cancel()

    def data_received(self, data: bytes) -> None:
        self.last_active = self.front.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._bad(b"upgrades are not relayed")
        except httptools.HttpParserError as exc:
            self._bad(str(exc).encode("ascii", "replace"))

    def _bad(self, why: bytes) -> None:
        current = self.current
        if current is not None and (current.sent_head or current.conn is not None):
            current.abort()
            return
        message = f"the request is not valid HTTP/1.1: {why.decode('ascii', 'replace')}"
        self.write(wire.error_response(current.path if current is not None else "", 400, "bad_request",
                                       message, close=True))
        if self.transport is not None:
            self.transport.close()

    # -- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        ex = Exchange(self)
        self.current = ex
        self.exchanges.append(ex)

    def on_url(self, url: bytes) -> None:
        assert self.current is not None
        self.current.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.current is not None
        self.current.headers.append((name, value))

    def on_headers_complete(self) -> None:
        ex = self.current
        assert ex is not None
        ex.method = self.parser.get_method()
        ex.keep_alive = self.parser.should_keep_alive()
        ex.http10 = self.parser.get_http_version() == "1.0"
        ex.head_done = True
        self._disarm()
        if self.exchanges and self.exchanges[0] is ex:
            ex.activate()
        else:
            self.pause_client()  # a pipelined request waits for the answer before it

    def on_body(self, data: bytes) -> None:
        assert self.current is not None
        self.current.request_body(data)

    def on_message_complete(self) -> None:
        assert self.current is not None
        self.current.request_end()

    # -- what exchanges call --------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Send bytes to the client."""
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def exchange_done(self, ex: Exchange) -> None:
        """An answer was written whole: close, or take the next request."""
        if self.exchanges and self.exchanges[0] is ex:
            self.exchanges.popleft()
        self.last_active = self.front.loop.time()
        if ex.close_after or not ex.keep_alive or not ex.body_done or self.front.draining:
            self.exchanges.clear()
            if self.transport is not None:
                self.transport.close()
            return
        if not self.exchanges:
            self._arm()
            return
        following = self.exchanges[0]
        if len(self.exchanges) <= 1:
            self.resume_client()
        if following.head_done and not following.active:
            following.activate()

    def pause_client(self) -> None:
        if not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_client(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        ex = self.exchanges[0] if self.exchanges else None
        if ex is not None and ex.conn is not None and ex.conn.transport is not None:
            ex.conn.transport.pause_reading()

    def resume_writing(self) -> None:
        ex = self.exchanges[0] if self.exchanges else None
        if ex is not None and ex.conn is not None and ex.conn.transport is not None:
            ex.conn.transport.resume_reading()

    def abort(self) -> None:
        """Cut the connection (the client sees it broken, not a clean end)."""
        if self.transport is not None:
            self.transport.abort()

    # -- timers and draining -----------------------------------------------------------------

    def _arm(self) -> None:
        self.head_since = self.front.loop.time()

    def _disarm(self) -> None:
        self.head_since = None

    def sweep(self, now: float) -> None:
        """Close a connection whose request head is late; look at a body still arriving."""
        timeout = self.front.header_timeout
        since = self.head_since
        if since is not None and timeout is not None and now - since >= timeout:
            self.head_since = None
            if self.transport is not None and not self.transport.is_closing():
                self.transport.close()
            return
        if self.exchanges:
            self.exchanges[0].body_late(now)

    def in_flight(self) -> bool:
        """Whether a request is under way (read by a drain)."""
        return bool(self.exchanges)

    def shutdown(self) -> None:
        """Close the connection if it is idle (a drain calls it)."""
        if not self.exchanges and self.transport is not None:
            self.transport.close()
