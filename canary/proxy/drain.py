"""Draining a stopping server without racing clients that reuse idle keep-alive connections.

HTTP/1.1 gives a server one safe way to end a keep-alive connection: a response that says
``Connection: close``. Closing a connection while it is idle races the client, which may be
writing its next request on it at that moment; the client then sees the connection reset
(httpx's ``ReadError``). So a draining server:

- answers every request normally, each response saying ``Connection: close`` (a request in flight
  when the drain begins too: the header is added when its response starts), then closes that
  connection;
- closes a connection that has been idle for ``idle_close`` seconds (longer than clients keep an
  idle connection: httpx, and the openai and ollama clients built on it, give up on one idle for
  5 s), or as soon as the client closes it;
- goes on accepting new connections while any connection open at the stop remains (no other
  process accepts on the listener until this one is gone), then stops accepting: connections
  made from then on wait in the listener's queue, held by the service manager, for the next
  daemon;
- lasts at most ``bound`` seconds; what is still running then is cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, MutableSet
from typing import Any

#: How long httpx (and the openai and ollama clients) keep an idle connection for reuse.
CLIENT_KEEPALIVE = 5.0
#: A connection idle this long is closed: past the clients' expiry, so none of them still uses it.
IDLE_CLOSE = CLIENT_KEEPALIVE + 1.0
#: The longest drain; requests and streams still running after it are cut.
DRAIN = 30.0
#: How often a draining server looks at its connections.
LOOK = 0.02


class DrainState:
    """Whether the server is draining; read as every response starts."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


def closing(app: Any, state: DrainState) -> Any:
    """The ASGI app, answering with ``Connection: close`` while the server drains."""

    async def closing_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        # Read when the response starts, not when the request came: a request already in flight
        # when the drain begins must tell the client too, or it would reuse a connection being closed.
        async def send_closing(message: Any) -> None:
            if state.active and message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, send_closing)

    return closing_app


def busy(connection: Any) -> bool:
    """Whether a connection has a request under way: a response not complete, or bytes of the next head."""
    in_flight = getattr(connection, "in_flight", None)
    if in_flight is not None:
        return bool(in_flight())
    cycle = getattr(connection, "cycle", None)
    if cycle is not None and not getattr(cycle, "response_complete", True):
        return True
    conn = getattr(connection, "conn", None)
    pending = getattr(conn, "trailing_data", (b"", False))[0] if conn is not None else b""
    return bool(pending)


def _close_idle(connections: Iterable[Any], now: float, idle_close: float) -> None:
    for connection in list(connections):
        if not busy(connection) and now - float(getattr(connection, "last_active", now)) >= idle_close:
            connection.shutdown()  # idle, so this closes it now


async def drain(
    servers: Iterable[Any], connections: MutableSet[Any], state: DrainState, *,
    bound: float, idle_close: float,
) -> None:
    """Drain ``connections`` (uvicorn's live set), then stop ``servers`` accepting; see the module."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    state.active = True
    open_at_stop = set(connections)
    accepting = True
    quiet = 0
    while loop.time() - start < bound:
        _close_idle(connections, loop.time(), idle_close)
        if accepting and not open_at_stop & set(connections):
            for server in servers:
                server.close()  # a socket the service manager holds keeps queueing for the next daemon
            accepting = False
        if not accepting:
            # Connections accepted just before the close register a moment later: the drain ends
            # only once none is left on a few looks in a row, or they would be left unread.
            quiet = 0 if connections else quiet + 1
            if quiet >= 5:
                return
        await asyncio.sleep(LOOK)
    for server in servers:
        server.close()
