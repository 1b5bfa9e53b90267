"""Serving ASGI apps on loopback from a background thread (the proxy, fixtures, demo services).

Every server here closes a connection whose request head has not fully arrived within
``header_timeout`` seconds, so half-open slow connections cannot pile up; uvicorn itself only
times out idle keep-alive connections. A response start message may carry ``"reason"``
(bytes), sent as the status line's reason phrase instead of the standard one. A response's
head is written together with its first body piece: one write, one wakeup of the client.

A server may be given a listening socket instead of an address: one the service manager holds,
so connections made while the daemon restarts wait in the kernel's queue. Stopping a server
with a ``drain`` drains it as ``canary.proxy.drain`` tells; an idle keep-alive connection is
closed only once idle for ``idle_close`` seconds, past the clients' own keep-alive expiry, while
the server runs as while it drains.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Collection
from typing import Any, Protocol

from canary.errors import UnavailableError
from canary.proxy.drain import DRAIN, IDLE_CLOSE, DrainState, closing, drain

__all__ = ["DRAIN", "IDLE_CLOSE", "BackgroundServer", "BodyTooLarge", "Served", "read_body"]

LOOPBACK_NAMES = {"localhost"}


class Served(Protocol):
    """A server as a session holds it: its URL, its listening socket (to hand over), and a stop."""

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        ...

    @property
    def listener(self) -> socket.socket | None:
        """The listening socket, when this process holds it."""
        ...

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving."""
        ...
#: Seconds a client has to send a whole request head, from connecting or from the last response.
HEADER_TIMEOUT = 10.0


class BodyTooLarge(Exception):
    """A request body grew past its limit while it was read."""


async def read_body(receive: Any, limit: int) -> bytes | None:
    """An ASGI request's whole body; None if the client left first; BodyTooLarge past ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        if not message.get("more_body", False):
            return chunk if not parts else b"".join([*parts, chunk])
        parts.append(chunk)


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine's loopback."""
    host = host.strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name in a Host header, without the port (``[::1]:80`` -> ``::1``), lower case, no final dot."""
    host = host.strip()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.lower().rstrip(".")


def host_allowed(host: str, allowed: Collection[str] = ()) -> bool:
    """Whether a request's Host header names loopback or one of the ``allowed`` names (``"*"``: any).

    A DNS-rebinding page reaches 127.0.0.1 under its own host name; refusing any other name
    keeps such pages away from loopback services.
    """
    name = host_name(host)
    if not name:
        return False
    return is_loopback(name) or "*" in allowed or name in {a.lower().rstrip(".") for a in allowed}


def listen_names(listen: str) -> tuple[str, ...]:
    """The Host names a listener on ``listen`` answers beside loopback ones.

    Its own host when it is named; ``"*"`` (any name) when it listens on every address, which
    the config allows only with ``allow_remote = true``: other machines then reach it by names
    of their own (``host.docker.internal``, the machine's name).
    """
    host, _ = split_listen(listen)
    if host in ("0.0.0.0", "::", ""):
        return ("*",)
    return () if is_loopback(host) else (host,)


def split_listen(listen: str) -> tuple[str, int]:
    """``127.0.0.1:11435`` or ``[::1]:11435`` into host and port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{listen!r} is not host:port")
    return host.strip("[]"), int(port)


def format_listen(host: str, port: int) -> str:
    """Host and port as a URL authority (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _ReasonConnection:
    """An h11 connection that writes the reason phrase the app asked for."""

    def __init__(self, conn: Any, response: Any) -> None:
        self._conn = conn
        self._response = response  # h11.Response, imported with uvicorn
        self.reason: bytes | None = None

    def send(self, event: Any) -> bytes | None:
        if self.reason is not None and isinstance(event, self._response):
            event = self._response(status_code=event.status_code, headers=event.headers,
                                   reason=self.reason)
        out: bytes | None = self._conn.send(event)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _CorkedTransport:
    """A transport that, while corked, gathers writes and sends them as one when uncorked."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._held: list[bytes] | None = None

    def cork(self) -> None:
        self._held = []

    def uncork(self) -> None:
        held, self._held = self._held, None
        if held:
            self._transport.write(b"".join(held))

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            self._transport.write(data)

    def close(self) -> None:
        self.uncork()  # what was written goes out before the connection closes
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _protocol_class(header_timeout: float | None) -> Any:
    """uvicorn's h11 protocol with a deadline on request heads and the ``reason`` extension."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        """Closes connections whose request head is late; honours ``"reason"`` in response starts."""

        _head_timer: asyncio.TimerHandle | None = None
        #: The loop's time of the last byte received or response completed (read by a drain).
        last_active = 0.0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.last_active = self.loop.time()
            self._arm()

        def data_received(self, data: bytes) -> None:
            self.last_active = self.loop.time()
            super().data_received(data)

        def _arm(self) -> None:
            self._disarm()
            if header_timeout is not None:
                self._head_timer = self.loop.call_later(header_timeout, self._head_late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_late(self) -> None:
            self._head_timer = None
            if self.transport is not None and not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            before = self.cycle
            super().handle_events()
            cycle = self.cycle
            if cycle is not None and cycle is not before:
                self._disarm()  # a whole head arrived
                conn = _ReasonConnection(cycle.conn, h11.Response)
                cycle.conn = conn  # type: ignore[assignment]
                corked = _CorkedTransport(cycle.transport)
                cycle.transport = corked  # type: ignore[assignment]
                send = cycle.send

                async def send_with_reason(message: Any) -> None:
                    if message["type"] == "http.response.start":
                        conn.reason = message.get("reason")
                        corked.cork()  # the head goes out with the first body piece
                        await send(message)
                        return
                    try:
                        await send(message)
                    finally:
                        corked.uncork()

                cycle.send = send_with_reason  # type: ignore[method-assign]

        def on_response_complete(self) -> None:
            self.last_active = self.loop.time()
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's head is due in time too

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return TimedH11Protocol


def _quiet_server_class() -> Any:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """A uvicorn server that sleeps until told to exit, instead of waking ten times a second."""

        _exit: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None
        drain: DrainState | None = None
        drain_for = 0.0
        idle_close = IDLE_CLOSE

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.drain is not None and self.drain_for > 0:
                await drain(self.servers, self.server_state.connections, self.drain,
                            bound=self.drain_for, idle_close=self.idle_close)
            await super().shutdown(sockets)

        async def main_loop(self) -> None:
            self._loop = asyncio.get_running_loop()
            self._exit = asyncio.Event()
            if not self.should_exit:
                await self._exit.wait()

        def request_exit(self) -> None:
            self.should_exit = True
            loop, event = self._loop, self._exit
            if loop is not None and event is not None and not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    return QuietServer


class BackgroundServer:
    """One uvicorn server in a daemon thread; ``start()`` returns once it accepts connections."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "server",
        header_timeout: float | None = HEADER_TIMEOUT, sock: socket.socket | None = None, drain: float = 0.0,
        idle_close: float = IDLE_CLOSE,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self.header_timeout = header_timeout
        self.inherited = sock
        self.drain = drain
        self.idle_close = idle_close
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def listener(self) -> socket.socket | None:
        """The listening socket while the server runs (to hand over to a successor)."""
        return self._sock

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the server runs on, once it runs."""
        return self._server._loop if self._server is not None else None

    @property
    def url(self) -> str:
        """Base URL of the running server."""
        return f"http://{format_listen(self.host, self.port)}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        """Bind, start serving, and wait until ready; a taken port is an UnavailableError."""
        import uvicorn

        _QuietServer = _quiet_server_class()
        sock = self._listener()
        sock.setblocking(False)
        self._sock = sock
        address = sock.getsockname()
        self.host, self.port = str(address[0]), int(address[1])
        state = DrainState()
        config = uvicorn.Config(
            closing(self.app, state) if self.drain > 0 else self.app,
            log_level="warning",
            access_log=False,
            server_header=False,
            date_header=False,
            lifespan="auto",
            timeout_graceful_shutdown=2,
            # uvicorn's own default (5 s) is httpx's expiry: a client could write on it as it closes.
            timeout_keep_alive=self.idle_close,  # type: ignore[arg-type]
            http=_protocol_class(self.header_timeout),
        )
        self._server = _QuietServer(config)
        self._server.drain = state
        self._server.drain_for = self.drain
        self._server.idle_close = self.idle_close
        ready = threading.Event()
        server = self._server

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)

            async def main() -> None:
                serve = asyncio.ensure_future(server.serve(sockets=[sock]))
                while not server.started and not serve.done():
                    await asyncio.sleep(0.005)
                ready.set()
                await serve

            try:
                loop.run_until_complete(main())
            finally:
                ready.set()
                loop.close()

        self._thread = threading.Thread(target=run, name=f"canary-{self.name}", daemon=True)
        self._thread.start()
        if not ready.wait(timeout) or not server.started:
            self.stop()
            raise UnavailableError(f"the {self.name} did not start on {self.url}")
        return self

    def _listener(self) -> socket.socket:
        if self.inherited is not None:
            return self.inherited
        return bind_listener(self.host, self.port, self.name)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving (draining first, when asked to) and wait for the thread."""
        if self._server is not None:
            self._server.request_exit()
        if self._thread is not None:
            self._thread.join(timeout + self.drain)
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def bind_listener(host: str, port: int, name: str) -> socket.socket:
    """A listening TCP socket on ``host:port``; a taken port is an UnavailableError naming ``name``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, so asyncio sets TCP_NODELAY: otherwise a body written after its
    # headers waits for the client's delayed ACK (~40 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UnavailableError(
            f"cannot listen on {format_listen(host, port)} for the {name}: {exc.strerror or exc}"
        ) from exc
    sock.listen(2048)
    return sock
