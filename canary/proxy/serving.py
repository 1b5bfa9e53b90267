"""Serving ASGI apps on loopback from a background thread (the proxy, fixtures, demo services).

A server may be given a listening socket instead of an address: one the service manager holds,
so connections made while the daemon restarts wait in the kernel's queue. Stopping a server
with a ``drain`` closes its listener at once, then lets what is in flight finish: every response
started from then on says ``Connection: close`` (so a request in flight or arriving on an idle
connection is answered, and the client knows not to reuse the connection), and a connection
still idle after ``IDLE_GRACE`` is closed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from typing import Any

from canary.errors import UnavailableError

LOOPBACK_NAMES = {"localhost"}
#: How long a draining server keeps idle keep-alive connections open for one last request.
IDLE_GRACE = 1.0
#: How long a draining server waits for requests and streams in flight before cutting them.
DRAIN = 60.0


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine's loopback."""
    host = host.strip("[]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_listen(listen: str) -> tuple[str, int]:
    """``127.0.0.1:11435`` or ``[::1]:11435`` into host and port."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{listen!r} is not host:port")
    return host.strip("[]"), int(port)


def format_listen(host: str, port: int) -> str:
    """Host and port as a URL authority (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Drain:
    """Whether the server is draining; read as every response starts."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


def _closing(app: Any, drain: _Drain) -> Any:
    """The app, answering with ``Connection: close`` while the server drains."""

    async def closing_app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        # Read when the response starts, not when the request came: a request already in flight
        # when the drain begins must tell the client too, or it would reuse a connection being closed.
        async def send_closing(message: Any) -> None:
            if drain.active and message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await app(scope, receive, send_closing)

    return closing_app


def _idle(connection: Any) -> bool:
    cycle = getattr(connection, "cycle", None)
    return cycle is None or bool(getattr(cycle, "response_complete", True))


def _quiet_server_class() -> Any:
    import uvicorn

    class QuietServer(uvicorn.Server):
        """A uvicorn server that sleeps until told to exit, instead of waking ten times a second."""

        _exit: asyncio.Event | None = None
        _loop: asyncio.AbstractEventLoop | None = None
        drain: _Drain | None = None
        drain_for = 0.0

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            if self.drain is not None and self.drain_for > 0:
                await self._drain()
            await super().shutdown(sockets)

        async def _drain(self) -> None:
            assert self.drain is not None
            for server in self.servers:
                server.close()  # the queue of a socket the service manager holds waits for the next daemon
            self.drain.active = True
            connections = self.server_state.connections
            for connection in list(connections):
                if not _idle(connection):
                    connection.shutdown()  # closes once its response is complete
            loop = asyncio.get_running_loop()
            start = loop.time()
            # Connections accepted just before the close register a moment later: the drain ends
            # only once none is left on a few looks in a row, or they would be left unread.
            quiet = 0
            while quiet < 5 and loop.time() - start < self.drain_for:
                await asyncio.sleep(0.02)
                quiet = 0 if connections else quiet + 1
                if connections and loop.time() - start >= IDLE_GRACE:
                    for connection in list(connections):
                        connection.shutdown()

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
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "server",
        sock: socket.socket | None = None,
        drain: float = 0.0,
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self.inherited = sock
        self.drain = drain
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

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
        drain = _Drain()
        config = uvicorn.Config(
            _closing(self.app, drain) if self.drain > 0 else self.app,
            log_level="warning",
            access_log=False,
            server_header=False,
            date_header=False,
            lifespan="auto",
            timeout_graceful_shutdown=2,
        )
        self._server = _QuietServer(config)
        self._server.drain = drain
        self._server.drain_for = self.drain
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
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, so asyncio sets TCP_NODELAY: otherwise a body written after its
        # headers waits for the client's delayed ACK (~40 ms).
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise UnavailableError(
                f"cannot listen on {format_listen(self.host, self.port)} for the {self.name}: "
                f"{exc.strerror or exc}"
            ) from exc
        sock.listen(2048)
        return sock

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
